package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redis"
)

// A free lock with a live waiter queued is that waiter's: a try-lock does
// not take it past the queue (the acquire script's fast path runs only
// when the resource has no queue), and takes it once the waiter is gone.
func TestNoBargingPastALiveWaiter(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	waiter := strings.Repeat("w", 32)
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.rdb.RPush(ctx, "dlm:{"+name+"}:queue", waiter)
	e.rdb.ZAdd(ctx, "dlm:{"+name+"}:live", goredisZ(float64(now.UnixMilli()+60_000), waiter))

	req := request(name, time.Minute, "")
	if _, err := s.Acquire(ctx, req); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("try-lock of a free lock with a live waiter queued: %v, want ErrTaken", err)
	}
	if e.rdb.Exists(ctx, "dlm:{"+name+"}").Val() != 0 {
		t.Fatal("the refused try-lock left a lock key")
	}
	// The waiter was told it is its turn.
	if n := e.rdb.LLen(ctx, "dlm:{"+name+"}:wake:"+waiter).Val(); n == 0 {
		t.Fatal("the queued waiter was not woken")
	}

	e.rdb.ZAdd(ctx, "dlm:{"+name+"}:live", goredisZ(float64(now.UnixMilli()-1000), waiter)) // its place lapses
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("try-lock once the waiter's place lapsed: %v", err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
}

// A token counter ahead of the server's clock (the clock stepped back, or
// a counter from elsewhere) is followed, not the clock: the next token is
// the counter plus one.
func TestTokenAboveTheClock(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := uint64(now.UnixMicro()) + 3600*1_000_000
	e.rdb.Set(ctx, "dlm:{"+name+"}:fence", strconv.FormatUint(ahead, 10), time.Hour)
	req := request(name, time.Minute, "")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != ahead+1 {
		t.Fatalf("token %d after a counter of %d", g.Token, ahead)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	g, err = s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != ahead+2 {
		t.Fatalf("second token %d after a counter of %d", g.Token, ahead)
	}
	if got := e.rdb.Get(ctx, "dlm:{"+name+"}:fence").Val(); got != strconv.FormatUint(ahead+2, 10) {
		t.Fatalf("counter %s after issuing %d", got, ahead+2)
	}
}

// A new resource's counter starts at the Redis server's clock in
// microseconds: its first token lies between two TIME readings around the
// acquisition, and is kept for the fence retention. The next grant takes
// the counter plus one. A counter that is lost (here deleted, as expiry or
// a restart without persistence would) starts again at the clock, above
// every token it issued.
func TestTokenCounterStartsAtTheServerClock(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	fence := "dlm:{" + name + "}:fence"
	req := request(name, time.Minute, "")
	cycle := func() uint64 {
		t.Helper()
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatal(err)
		}
		return g.Token
	}
	atClock := func(what string) uint64 {
		t.Helper()
		before, err := e.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		tok := cycle()
		after, err := e.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := uint64(before.UnixMicro()), uint64(after.UnixMicro()); tok < lo || tok > hi {
			t.Fatalf("%s token %d outside the server's clock readings [%d, %d]", what, tok, lo, hi)
		}
		if ttl := e.rdb.PTTL(ctx, fence).Val(); ttl <= 0 || ttl > redis.DefaultFenceRetention {
			t.Fatalf("the counter's TTL is %s, want the fence retention", ttl)
		}
		return tok
	}
	first := atClock("the first")
	if next := cycle(); next != first+1 {
		t.Fatalf("the second token is %d after %d, want the counter plus one", next, first)
	}
	e.rdb.Del(ctx, fence)
	if again := atClock("after the counter's loss, the"); again <= first+1 {
		t.Fatalf("token %d after the counter's loss, not above the %d issued", again, first+1)
	}
}

// An attempt by the owner that holds the lock already (an earlier
// attempt's reply was lost) is granted again, with the same token and its
// TTL renewed from this call.
func TestHolderAskingAgainKeepsItsToken(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, time.Minute, "")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.rdb.PExpire(ctx, "dlm:{"+name+"}", time.Second)
	again, err := s.Acquire(ctx, req)
	if err != nil || again.Token != g.Token {
		t.Fatalf("the holder's second attempt = token %d, %v; want token %d", again.Token, err, g.Token)
	}
	if ttl := e.rdb.PTTL(ctx, "dlm:{"+name+"}").Val(); ttl <= time.Second {
		t.Fatalf("the lock's TTL is %s after the second attempt, want it renewed to a minute", ttl)
	}
	if err := s.Release(ctx, req, again); err != nil {
		t.Fatal(err)
	}
}

// A lock granted with no queue is marked MarkAlone, and its release runs
// GET and DEL alone. A caller that queues for it marks it MarkQueued, and
// the release hands the lock to that caller, with no refresh to help it
// (the queue refresh is an hour); the handed lock is marked MarkQueued.
func TestQueueMark(t *testing.T) {
	e := newEnv(t)
	c, s := e.client(redis.WithQueueRefresh(time.Hour))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	lock := "dlm:{" + name + "}"
	mark := func(want, when string) {
		t.Helper()
		if v := e.rdb.Get(ctx, lock).Val(); len(v) < 32+redislua.StampLen || v[32:33] != want {
			t.Fatalf("%s the lock holds %q, want the mark %s after the owner", when, v, want)
		}
	}

	req := request(name, time.Minute, "")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mark(redislua.MarkAlone, "granted with no queue,")
	testenv.ResetRedisStats(t, e.rdb)
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if st := testenv.RedisScriptStats(t, e.rdb); st.Scripts != 1 || st.Inner != 2 {
		t.Fatalf("the release of a lock nobody queued for ran %v commands in %v scripts, want GET and DEL in one", st.Inner, st.Scripts)
	}

	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mark(redislua.MarkAlone, "granted with no queue,")
	got := storetest.Acquiring(ctx, t, c, name, dlm.WithTTL(time.Minute))
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	mark(redislua.MarkQueued, "with a caller queued,")
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		mark(redislua.MarkQueued, "handed to the waiter,")
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter queued behind a lock marked alone was not handed it at the release")
	}
}

package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
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

// A token is the Redis server's clock in microseconds at the grant (when no
// counter is ahead of it): it lies between two TIME readings around the
// acquisition. Grants go on until one falls in a second's first tenth,
// where the microseconds have fewer than six digits.
func TestTokenIsTheServerClock(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	req := request(storetest.Resource(t), time.Minute, "")
	var start time.Time
	for short := false; !short; {
		before, err := e.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if start.IsZero() {
			start = before
		} else if before.Sub(start) > time.Minute {
			t.Fatal("no grant within a second's first tenth in a minute of the server's clock")
		}
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		after, err := e.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := uint64(before.UnixMicro()), uint64(after.UnixMicro())+1; g.Token < lo || g.Token > hi {
			t.Fatalf("token %d outside the server's clock readings [%d, %d]", g.Token, lo, hi)
		}
		short = before.Unix() == after.Unix() && after.Nanosecond() < 100_000_000
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatal(err)
		}
	}
}

package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redis"
)

// The release hands the lock to the first waiter inside its own script: the
// moment Release returns, the lock is the waiter's, with its metadata, the
// release's time as the grant's, and a TTL that Redis counts from the
// release, and the waiter's deadline is no later than Redis's.
func TestReleaseHandsTheLockToTheHead(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := storetest.Acquiring(ctx, t, c, name, dlm.WithTTL(time.Minute), dlm.WithMetadata("the waiter"))
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock := "dlm:{" + name + "}"
	const head = 32 + redislua.StampLen
	v := e.rdb.Get(ctx, lock).Val()
	if len(v) != head+len("the waiter") || v[head:] != "the waiter" || v[32:33] != redislua.MarkQueued {
		t.Fatalf("right after the release the lock holds %q, want the waiter's owner, the queue mark, the grant's time and metadata", v)
	}
	if at := redislua.GrantTime(released); v[33:head] < at || v[33:head] > redislua.GrantTime(time.Now()) {
		t.Fatalf("the handed lock's grant time %s is not the release's (from %s)", v[33:head], at)
	}
	if n := e.waiting(name); n != 0 {
		t.Fatalf("%d waiters still queued after the handoff", n)
	}
	if n := e.rdb.HLen(ctx, lock+":req").Val(); n != 0 {
		t.Fatalf("%d requests left after the handoff", n)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)
	if l.Token() <= holder.Token() {
		t.Fatalf("the handed grant's token %d is not above the holder's %d", l.Token(), holder.Token())
	}
	before := time.Now()
	left := time.Until(l.Deadline())
	pttl := e.rdb.PTTL(ctx, lock).Val()
	if slack := time.Since(before) + time.Millisecond; left > pttl+slack {
		t.Fatalf("the lease's deadline is %s away, Redis keeps the key %s: the lease outlives the lock", left, pttl)
	}
}

// A lock handed to a waiter that then gives up (the leave script, as the
// store runs it when the wait ends) is freed, and the next waiter gets it,
// instead of it being held for the gone waiter's TTL.
func TestHandedLockOfAWaiterThatLeavesIsFreed(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client(redis.WithQueueRefresh(time.Hour)) // no refreshes: only the handoff moves the waiter
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	lock := "dlm:{" + name + "}"
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter ahead of the real one that will leave without ever popping
	// its wake-up list: its place, liveness and request, as its attempt
	// would have left them.
	gone := strings.Repeat("a", 32)
	now, _ := e.rdb.Time(ctx).Result()
	e.rdb.RPush(ctx, lock+":queue", gone)
	e.rdb.ZAdd(ctx, lock+":live", goredisZ(float64(now.UnixMilli()+time.Minute.Milliseconds()), gone))
	e.rdb.HSet(ctx, lock+":req", gone, "1 60000 gone")

	got := storetest.Acquiring(ctx, t, c, name, dlm.WithTTL(time.Minute))
	storetest.Await(t, 5*time.Second, "the real waiter queued", func() bool { return e.waiting(name) == 2 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := e.rdb.Get(ctx, lock).Val(); len(v) != 32+redislua.StampLen+len("gone") || !strings.HasPrefix(v, gone) || !strings.HasSuffix(v, "gone") {
		t.Fatalf("after the release the lock holds %q, want the waiter ahead's", v)
	}
	err = redislua.Leave.Run(ctx, e.rdb, []string{lock, lock + ":queue", lock + ":live"}, gone, "2000").Err()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		l.Release(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("the lock handed to a waiter that left was not passed on")
	}
}

// Redis restarts empty while waiters queue: the queue is gone with the
// lock. The waiters queue again at their next refresh, each is granted in
// turn, and no two hold at once.
func TestWaitersSurviveARestartEmpty(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client(redis.WithQueueRefresh(50 * time.Millisecond))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 4
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for i := range waiters {
		me := fmt.Sprintf("W%d", i)
		wg.Go(func() {
			err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
				n := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond) // hold it a moment: overlaps would show
				return nil
			}, dlm.WithTTL(time.Minute), dlm.WithMetadata(me))
			if err != nil {
				t.Errorf("%s: %v", me, err)
			}
		})
		storetest.Await(t, 10*time.Second, me+" queued", func() bool { return e.waiting(name) == i+1 })
	}
	e.srv.Kill()
	e.srv.Restart()
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Fatalf("%d waiters held the lock at once", m)
	}
	if err := holder.Release(ctx); !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("the holder's release after the restart = %v, want ErrNotHeld", err)
	}
}

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestFIFOHandoff(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	storetest.FIFOHandoff(t, c, 8, e.waiting)
}

func TestWaitTimeoutIsNotAcquired(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	// A wait that ran out leaves nothing queued, and its connection healthy,
	// back in the pool: no new connections after the first wait. The
	// holder's lock is on a shared session, which takes none of the pool.
	conns := int64(-1)
	storetest.WaitTimeoutIsContention(t, c, 100*time.Millisecond, 4, func(name string) {
		e.noWaiters(name)
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Fatalf("%d connections out of the pool, want none", n)
		}
		n := pool.Stat().NewConnsCount()
		if conns >= 0 && n != conns {
			t.Fatalf("a cancelled wait cost its connection: %d connections made, then %d", conns, n)
		}
		conns = n
	})
}

func TestContextCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	name := storetest.ContextCancelWhileWaiting(t, c, e.waiting, e.noWaiters)
	if n := e.locks(name, true) + e.locks(name, false); n != 0 {
		t.Fatalf("%d locks left after the cancelled waits", n)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

// TestCancelRacingGrant ends waits at about the moment the lock is handed to
// them: whichever wins, nothing may stay held or queued.
func TestCancelRacingGrant(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	// Two connections ready in the pool, so that the short waits are spent
	// waiting for the lock, not for a new connection.
	warm := make([]*dlm.Lease, 2)
	for i := range warm {
		var err error
		if warm[i], err = c.Acquire(ctx, storetest.Resource(t)); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range warm {
		l.Release(ctx)
	}
	granted, cancelled := 0, 0
	for i := range 40 {
		holder, err := c.Acquire(ctx, name, dlm.WithWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		hold := 5 * time.Millisecond
		wctx, cancel := context.WithTimeout(ctx, hold+time.Duration(i%10-2)*400*time.Microsecond)
		released := make(chan error, 1)
		time.AfterFunc(hold, func() { released <- holder.Release(ctx) })
		l, err := c.Acquire(wctx, name)
		cancel()
		if rerr := <-released; rerr != nil {
			t.Fatal(rerr)
		}
		switch {
		case err == nil:
			granted++
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, dlm.ErrNotAcquired):
			cancelled++
		default:
			t.Fatalf("wait %d: %v", i, err)
		}
		if n := e.locks(name, false); n != 0 {
			t.Fatalf("wait %d: %d requests left queued", i, n)
		}
		// A try that the deadline cut short on a shared session is
		// unlocked by the session right after its answer, not before
		// Acquire returns.
		storetest.Await(t, 10*time.Second, "no lock left held", func() bool { return e.locks(name, true) == 0 })
	}
	t.Logf("%d grants, %d cancelled waits", granted, cancelled)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

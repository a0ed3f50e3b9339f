package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

func TestFIFOHandoff(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Do(ctx, name, func(context.Context, *dlm.Lease) error {
				order <- i
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		await(t, 5*time.Second, "waiter queued in pg_locks", func() bool {
			return e.locks(name, false) == i+1
		})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d was granted in turn %d: not FIFO", got, want)
		}
		want++
	}
}

func TestWaitTimeoutIsNotAcquired(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	var conns int64
	for i := range 4 {
		start := time.Now()
		_, err = c.Acquire(ctx, name, dlm.WithWait(100*time.Millisecond))
		if !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("err = %v, want ErrNotAcquired", err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlm.ErrUnavailable) {
			t.Fatalf("err = %v: a wait that ran out is contention only", err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("gave up after %s, before the wait", d)
		}
		if n := e.locks(name, false); n != 0 {
			t.Fatalf("%d waiters left in pg_locks", n)
		}
		// The cancelled wait leaves its connection healthy, back in the
		// pool: no new connections after the first wait.
		if i == 0 {
			conns = pool.Stat().NewConnsCount()
		} else if n := pool.Stat().NewConnsCount(); n != conns {
			t.Fatalf("a cancelled wait cost its connection: %d connections made, then %d", conns, n)
		}
	}
	if n := pool.Stat().AcquiredConns(); n != 1 {
		t.Fatalf("%d connections out of the pool, want only the holder's", n)
	}
	_, err = c.Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("try-lock err = %v, want ErrNotAcquired", err)
	}
}

func TestContextCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	name := resource(t)
	holder, err := c.Acquire(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name)
		done <- err
	}()
	await(t, 5*time.Second, "waiter queued", func() bool { return e.locks(name, false) == 1 })
	cancel()
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("Acquire did not return promptly after cancel")
	}
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	if n := e.locks(name, false); n != 0 {
		t.Fatalf("%d waiters left in pg_locks", n)
	}

	// A deadline, likewise.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, name)
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with DeadlineExceeded", err)
	}
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
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
	ctx := ctxT(t)
	name := resource(t)
	// Two connections ready in the pool, so that the short waits are spent
	// waiting for the lock, not for a new connection.
	warm := make([]*dlm.Lease, 2)
	for i := range warm {
		var err error
		if warm[i], err = c.Acquire(ctx, resource(t)); err != nil {
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
		if n := e.locks(name, true) + e.locks(name, false); n != 0 {
			t.Fatalf("wait %d: %d locks left held or queued", i, n)
		}
	}
	t.Logf("%d grants, %d cancelled waits", granted, cancelled)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

package redis_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/redis"
)

func TestMutualExclusion(t *testing.T) {
	e := newEnv(t)
	c1, _ := e.client()
	c2, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)

	const workers, iterations = 32, 15
	var counter, inside, maxInside atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iterations {
				err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for {
						m := maxInside.Load()
						if n <= m || maxInside.CompareAndSwap(m, n) {
							break
						}
					}
					// An unprotected read-modify-write: two holders at
					// once would lose an update.
					v := counter.Load()
					runtime.Gosched()
					counter.Store(v + 1)
					return nil
				}, dlm.WithTTL(5*time.Second))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := counter.Load(), int64(workers*iterations); got != want {
		t.Fatalf("counter = %d, want %d: lost updates, two holders at once", got, want)
	}
	if m := maxInside.Load(); m != 1 {
		t.Fatalf("%d holders inside the critical section at once", m)
	}
}

func TestOwnerCheckAfterExpiry(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)

	a, err := c.Acquire(ctx, name, dlm.WithTTL(100*time.Millisecond), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	within(t, a.Lost(), 2*time.Second, "A's lease loss")
	if !errors.Is(a.Err(), dlm.ErrLost) {
		t.Fatalf("A.Err() = %v, want ErrLost", a.Err())
	}
	b, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if err := a.Extend(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("A.Extend = %v, want ErrLost", err)
	}
	if err := a.Release(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("A.Release = %v, want ErrLost", err)
	}
	if err := b.Extend(ctx); err != nil {
		t.Fatalf("B.Extend after A's attempts = %v, B must still hold", err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
}

func TestReleaseByNonOwnerInStore(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)

	// A holds with a long TTL but its key is overwritten behind its back,
	// as if the lock had expired and been taken by B.
	a, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	key := "dlm:{" + name + "}"
	if err := e.rdb.Set(ctx, key, strings.Repeat("b", 32), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	err = a.Release(ctx)
	if !errors.Is(err, dlm.ErrLost) || !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrLost and ErrNotHeld", err)
	}
	if v, _ := e.rdb.Get(ctx, key).Result(); v != strings.Repeat("b", 32) {
		t.Fatalf("A's release touched B's lock: value now %q", v)
	}
	within(t, a.Lost(), time.Second, "Lost after failed owner check")
}

func TestReleaseIsIdempotent(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, resource(t), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second Release = %v, want nil", err)
	}
	if err := l.Extend(ctx); !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("Extend after Release = %v, want ErrNotHeld", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("a released lease reports Lost")
	default:
	}
}

func TestTokensStrictlyIncrease(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	var last uint64
	next := func(what string, opts ...dlm.Option) *dlm.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, name, append([]dlm.Option{dlm.WithWait(5 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d is not above the previous %d", what, l.Token(), last)
		}
		last = l.Token()
		return l
	}
	for range 20 {
		if err := next("sequential").Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l := next("before expiry", dlm.WithTTL(50*time.Millisecond))
	within(t, l.Lost(), 2*time.Second, "expiry")
	await(t, 2*time.Second, "key expiry", func() bool {
		return e.rdb.Exists(ctx, "dlm:{"+name+"}").Val() == 0
	})
	next("after expiry").Release(ctx)

	// Expiry of the counter key itself, then a restart without persistence.
	e.rdb.Del(ctx, "dlm:{"+name+"}:fence")
	next("after the counter key was deleted").Release(ctx)
	e.srv.Kill()
	e.srv.Restart()
	next("after a restart without persistence").Release(ctx)
}

func TestAutoRenewHoldsPastTTL(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	const ttl = 200 * time.Millisecond
	err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
		hold := time.NewTimer(5 * ttl)
		defer hold.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-hold.C:
		}
		// Nobody else can take it now.
		_, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if !errors.Is(err, dlm.ErrNotAcquired) {
			t.Errorf("second Acquire after 5x TTL = %v, want ErrNotAcquired", err)
		}
		return nil
	}, dlm.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
}

func TestLostFiresWhenKeyVanishes(t *testing.T) {
	const ttl = 600 * time.Millisecond
	bound := ttl/3 + 300*time.Millisecond // documented: TTL/3 + one round trip; slack for -race
	cases := map[string]func(e *env, name string){
		"DEL": func(e *env, name string) { e.rdb.Del(context.Background(), "dlm:{"+name+"}") },
		"FLUSHALL": func(e *env, _ string) {
			e.rdb.FlushAll(context.Background())
		},
	}
	for what, vanish := range cases {
		t.Run(what, func(t *testing.T) {
			e := newEnv(t)
			c, _ := e.client()
			ctx := ctxT(t)
			name := resource(t)
			cancelled := make(chan struct{})
			var cause error
			err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
				vanish(e, name)
				within(t, ctx.Done(), bound, "Do's context cancellation")
				cause = context.Cause(ctx)
				close(cancelled)
				return ctx.Err()
			}, dlm.WithTTL(ttl))
			<-cancelled
			if !errors.Is(cause, dlm.ErrLost) {
				t.Fatalf("cause = %v, want ErrLost", cause)
			}
			if !errors.Is(err, dlm.ErrLost) {
				t.Fatalf("Do = %v, want ErrLost", err)
			}
		})
	}
}

func TestLostFiresWhenRedisDies(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	const ttl = 600 * time.Millisecond
	l, err := c.Acquire(ctx, resource(t), dlm.WithTTL(ttl), dlm.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Deadline()
	e.srv.Kill()
	// Renewals fail; the lease must end by its deadline (at most the TTL
	// after the last renewal), never later.
	within(t, l.Lost(), 2*ttl, "Lost after the server died")
	if late := time.Since(deadline); late > ttl+200*time.Millisecond {
		t.Fatalf("Lost fired %s after the first deadline; the bound is one TTL", late)
	}
	if !errors.Is(l.Err(), dlm.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
}

func TestWaitTimeoutIsNotAcquired(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	start := time.Now()
	_, err = c.Acquire(ctx, name, dlm.WithWait(150*time.Millisecond))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("err = %v: a wait that ran out is contention only", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before the wait", d)
	}
	_, err = c.Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("try-lock err = %v, want ErrNotAcquired", err)
	}
	assertQueueEmpty(t, e, name)
}

func TestContextCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	name := resource(t)
	holder, err := c.Acquire(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctxT(t))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name)
		done <- err
	}()
	await(t, 5*time.Second, "waiter queued", func() bool {
		return e.rdb.LLen(ctxT(t), "dlm:{"+name+"}:queue").Val() == 1
	})
	cancel()
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("Acquire did not return promptly after cancel")
	}
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	assertQueueEmpty(t, e, name)

	// A deadline, likewise.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, name)
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with DeadlineExceeded", err)
	}
}

func assertQueueEmpty(t *testing.T, e *env, name string) {
	t.Helper()
	ctx := ctxT(t)
	if n := e.rdb.LLen(ctx, "dlm:{"+name+"}:queue").Val(); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
	if n := e.rdb.ZCard(ctx, "dlm:{"+name+"}:live").Val(); n != 0 {
		t.Fatalf("%d liveness entries left", n)
	}
}

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
		await(t, 5*time.Second, "waiter queued", func() bool {
			return e.rdb.LLen(ctx, "dlm:{"+name+"}:queue").Val() == int64(i+1)
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

func TestDeadWaiterPassesItsTurn(t *testing.T) {
	e := newEnv(t)
	const refresh = 50 * time.Millisecond
	c, _ := e.client(redis.WithQueueRefresh(refresh))
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that queued and then died: its place is in the queue with
	// a liveness deadline that nobody will refresh.
	dead := strings.Repeat("d", 32)
	now, _ := e.rdb.Time(ctx).Result()
	e.rdb.RPush(ctx, "dlm:{"+name+"}:queue", dead)
	e.rdb.ZAdd(ctx, "dlm:{"+name+"}:live", goredisZ(float64(now.UnixMilli()+(4*refresh).Milliseconds()), dead))

	got := make(chan struct{})
	go func() {
		l, err := c.Acquire(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		l.Release(ctx)
		close(got)
	}()
	await(t, 5*time.Second, "live waiter queued", func() bool {
		return e.rdb.LLen(ctx, "dlm:{"+name+"}:queue").Val() == 2
	})
	holder.Release(ctx)
	// Documented bound: five refresh intervals.
	within(t, got, 5*refresh+500*time.Millisecond, "grant past a dead waiter")
}

func TestDoReleasesOnPanic(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic to propagate", r)
			}
		}()
		_ = c.Do(ctx, name, func(context.Context, *dlm.Lease) error { panic("boom") })
	}()
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("lock still held after Do panicked: %v", err)
	}
	l.Release(ctx)
}

func TestMaxHold(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	const ttl, maxHold = 100 * time.Millisecond, 300 * time.Millisecond
	start := time.Now()
	err := c.Do(ctx, resource(t), func(ctx context.Context, l *dlm.Lease) error {
		within(t, ctx.Done(), 5*maxHold, "end at maximum hold")
		return context.Cause(ctx)
	}, dlm.WithTTL(ttl), dlm.WithMaxHold(maxHold))
	if !errors.Is(err, dlm.ErrLost) || !strings.Contains(err.Error(), "maximum hold") {
		t.Fatalf("err = %v, want ErrLost for the maximum hold", err)
	}
	if d := time.Since(start); d > maxHold+50*time.Millisecond {
		t.Fatalf("held for %s, past the maximum hold %s", d, maxHold)
	}
}

func TestUnavailableIsNotContention(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	e.srv.Kill()
	ctx := ctxT(t)
	_, err := c.Acquire(ctx, resource(t), dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("one attempt on a dead server = %v, want ErrUnavailable only", err)
	}
	_, err = c.Acquire(ctx, resource(t), dlm.WithWait(200*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("waiting on a dead server = %v, want ErrUnavailable only", err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	cases := []struct {
		name     string
		resource string
		opts     []dlm.Option
		want     error
	}{
		{"empty name", "", nil, dlm.ErrInvalid},
		{"long name", strings.Repeat("x", dlm.MaxResourceBytes+1), nil, dlm.ErrInvalid},
		{"invalid UTF-8", "a\xffb", nil, dlm.ErrInvalid},
		{"zero TTL", "r", []dlm.Option{dlm.WithTTL(0)}, dlm.ErrInvalid},
		{"tiny TTL", "r", []dlm.Option{dlm.WithTTL(time.Microsecond)}, dlm.ErrInvalid},
		{"absurd TTL", "r", []dlm.Option{dlm.WithTTL(48 * time.Hour)}, dlm.ErrInvalid},
		{"negative wait", "r", []dlm.Option{dlm.WithWait(-time.Second)}, dlm.ErrInvalid},
		{"unknown mode", "r", []dlm.Option{dlm.WithMode(dlm.Mode(42))}, dlm.ErrInvalid},
		{"unsupported mode", "r", []dlm.Option{dlm.WithMode(dlm.PR)}, dlm.ErrUnsupported},
		{"long metadata", "r", []dlm.Option{dlm.WithMetadata(strings.Repeat("m", dlm.MaxMetadataBytes+1))}, dlm.ErrInvalid},
		{"max hold below TTL", "r", []dlm.Option{dlm.WithTTL(time.Second), dlm.WithMaxHold(time.Millisecond * 500)}, dlm.ErrInvalid},
		{"nil retry", "r", []dlm.Option{dlm.WithRetry(nil)}, dlm.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Acquire(ctx, tc.resource, tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
				t.Fatalf("err = %v mixes in contention or outage", err)
			}
		})
	}
	// Names with braces and percent signs are fine: they stay in one slot.
	for _, name := range []string{"}a", "a}b{c", "100%", "{x}"} {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		l.Release(ctx)
	}
	bad := dlm.New(redis.New(e.rdb, redis.WithPrefix("a{b")))
	if _, err := bad.Acquire(ctx, "r"); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("bad prefix: err = %v, want ErrInvalid", err)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t)
	func() {
		c, s := e.client()
		ctx := ctxT(t)
		name := resource(t)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.Do(ctx, name, func(context.Context, *dlm.Lease) error { return nil },
					dlm.WithTTL(time.Second))
			}()
		}
		wg.Wait()
		l, _ := c.Acquire(ctx, name)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, _ = c.Acquire(wctx, name)
		cancel()
		l.Release(ctx)
		s.Close()
	}()
	// The store's listeners are gone after Close; go-redis's own pool
	// goroutines belong to the client, which the cleanup closes, so count
	// only ours.
	await(t, 3*time.Second, "goroutines to settle", func() bool {
		return countOurs() == 0
	})
}

func TestScriptCacheFlushed(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	// EVALSHA now answers NOSCRIPT; the store falls back to EVAL.
	if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

func countOurs() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	stacks := strings.Split(string(buf[:n]), "\n\n")
	count := 0
	for _, s := range stacks {
		if strings.Contains(s, "github.com/dlmhq/dlm.") && !strings.Contains(s, "_test.") ||
			strings.Contains(s, "github.com/dlmhq/dlm/redis.(*Store)") {
			count++
		}
	}
	return count
}

func TestLongWaitGivesAFullLease(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 200 * time.Millisecond
	got := make(chan *dlm.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	await(t, 5*time.Second, "waiter queued", func() bool {
		return e.rdb.LLen(ctx, "dlm:{"+name+"}:queue").Val() == 1
	})
	time.Sleep(3 * ttl) // the waiter waits well past its own TTL
	holder.Release(ctx)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if left := time.Until(l.Deadline()); left < ttl/2 {
		t.Fatalf("a lease granted after a long wait has %s left of its %s TTL", left, ttl)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost at once: %v", l.Err())
	default:
	}
	l.Release(ctx)
}

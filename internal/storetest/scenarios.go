package storetest

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
)

// MutualExclusion runs workers goroutines, spread over clients in turn, that
// each take the lock on one fresh resource iterations times with Do (given
// opts) and, holding it, increment a counter with an unprotected
// read-modify-write. It fails on any error, on a lost update, or if two
// holders were ever inside at once. It returns the resource, for checks of
// what the store left behind.
func MutualExclusion(t *testing.T, clients []*dlm.Client, workers, iterations int, opts ...dlm.Option) string {
	t.Helper()
	return MutualExclusionWith(t, clients, workers, iterations, func(int) []dlm.Option { return opts })
}

// MutualExclusionWith is MutualExclusion with the options of each worker's
// iteration i given by opts(i), to mix kinds of waits.
func MutualExclusionWith(t *testing.T, clients []*dlm.Client, workers, iterations int, opts func(i int) []dlm.Option) string {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	var counter, inside, maxInside atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for i := range iterations {
				err := c.Do(ctx, name, func(context.Context, *dlm.Lease) error {
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
				}, opts(i)...)
				if err != nil {
					errs <- err
					return
				}
			}
		})
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
	return name
}

// FIFOHandoff queues waiters behind a holder of a fresh resource, one at a
// time (waiting(resource) reports how many requests wait in the store), and
// checks that the release hands the lock to them in the order they came.
func FIFOHandoff(t *testing.T, c *dlm.Client, waiters int, waiting func(resource string) int) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	// A TTL that outlasts the queueing however slow the machine: the
	// release, not an expiry, must start the hand-over.
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			err := c.Do(ctx, name, func(context.Context, *dlm.Lease) error {
				order <- i
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
		Await(t, 10*time.Second, "waiter queued", func() bool { return waiting(name) == i+1 })
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

// WaitTimeoutIsContention holds the lock on a fresh resource and has c wait
// for it rounds times, for wait each: every wait must fail with
// ErrNotAcquired only (neither DeadlineExceeded nor ErrUnavailable), and not
// before the wait is over; a try-lock then fails with ErrNotAcquired. After
// each attempt, with the lock still held, left (if not nil) checks that the
// attempt left nothing behind in the store.
func WaitTimeoutIsContention(t *testing.T, c *dlm.Client, wait time.Duration, rounds int, left func(resource string)) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	// A TTL that outlasts the rounds however slow the machine: the waits
	// must run out against a lock that is certainly held.
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		start := time.Now()
		_, err = c.Acquire(ctx, name, dlm.WithWait(wait))
		if !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("err = %v, want ErrNotAcquired", err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlm.ErrUnavailable) {
			t.Fatalf("err = %v: a wait that ran out is contention only", err)
		}
		if d := time.Since(start); d < wait {
			t.Fatalf("gave up after %s, before the wait", d)
		}
		if left != nil {
			left(name)
		}
	}
	_, err = c.Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("try-lock err = %v, want ErrNotAcquired", err)
	}
	if left != nil {
		left(name)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ContextCancelWhileWaiting holds the lock on a fresh resource and checks
// that cancelling the context of a waiting Acquire (queued: waiting(resource)
// is 1) ends it promptly (10 s at the most, for a loaded machine; the time
// taken is logged) with ErrNotAcquired joined with context.Canceled, and
// that a context deadline ends a wait with ErrNotAcquired joined with
// DeadlineExceeded. After each, with the lock still held, left (if not nil)
// checks that the waiter left nothing behind. It releases the lock and
// returns the resource.
func ContextCancelWhileWaiting(t *testing.T, c *dlm.Client, waiting func(resource string) int, left func(resource string)) string {
	t.Helper()
	name := Resource(t)
	// A TTL that outlasts the waits however slow the machine.
	holder, err := c.Acquire(Context(t), name, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name)
		done <- err
	}()
	Await(t, 10*time.Second, "waiter queued", func() bool { return waiting(name) == 1 })
	cancel()
	cancelled := time.Now()
	select {
	case err = <-done:
		t.Logf("Acquire returned %s after the cancel", time.Since(cancelled))
	case <-time.After(10 * time.Second): // a wait that ignores its context never returns
		t.Fatal("Acquire did not return promptly after cancel")
	}
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	if left != nil {
		left(name)
	}

	// A deadline, likewise.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, name)
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with DeadlineExceeded", err)
	}
	if left != nil {
		left(name)
	}
	if err := holder.Release(Context(t)); err != nil {
		t.Fatal(err)
	}
	return name
}

// LossEndsDo runs Do on a fresh resource with a TTL of ttl and, inside it,
// has lose take the lock away from the lease behind its back. Do's context
// must end with an ErrLost cause, and Do must return ErrLost. The loss must
// be noticed by the store (the next renewal, every ttl/3, or the store's own
// notice) before the lease's deadline would have ended it anyway: pass a ttl
// of a few seconds, so that a loaded machine keeps that order. The time it
// took is logged. It returns the cause, for the store's own checks.
func LossEndsDo(t *testing.T, c *dlm.Client, ttl time.Duration, lose func(l *dlm.Lease)) error {
	t.Helper()
	var cause error
	var took time.Duration
	var noticed, deadline time.Time
	err := c.Do(Context(t), Resource(t), func(ctx context.Context, l *dlm.Lease) error {
		lose(l)
		// Not a bound on the store: the lease's own deadline ends it by
		// then. The order is checked below.
		took = Within(t, ctx.Done(), ttl+10*time.Second, "Do's context cancellation")
		noticed, deadline = time.Now(), l.Deadline()
		cause = context.Cause(ctx)
		return ctx.Err()
	}, dlm.WithTTL(ttl))
	if !errors.Is(cause, dlm.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", cause)
	}
	if !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
	t.Logf("loss noticed %s after the lock was taken away (TTL %s)", took, ttl)
	if !noticed.Before(deadline) {
		t.Fatalf("loss noticed %s after the lease's deadline: the store did not notice it, the lease expired (cause %v)",
			noticed.Sub(deadline), cause)
	}
	return cause
}

// LostWhenServerDies acquires a renewing lease with a TTL of 600 ms and then
// calls kill, which stops the store's server. The renewals fail, and the
// lease must be lost, with ErrLost, by its deadline: at most one TTL after
// the last renewal. How late the loss came after the deadline seen before
// the kill is logged; the check allows a loaded machine 10 s of slack, to
// tell a lease that is never lost from one that is late.
func LostWhenServerDies(t *testing.T, c *dlm.Client, kill func()) {
	t.Helper()
	const ttl = 600 * time.Millisecond
	l, err := c.Acquire(Context(t), Resource(t), dlm.WithTTL(ttl), dlm.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Deadline()
	kill()
	Within(t, l.Lost(), time.Until(deadline)+ttl+10*time.Second, "Lost after the server died")
	t.Logf("Lost fired %s after the deadline seen before the kill; the bound is one TTL (%s)", time.Since(deadline), ttl)
	if !errors.Is(l.Err(), dlm.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
}

// BadInput checks that names and options outside package dlm's limits fail
// with ErrInvalid only, whatever the store: neither contention nor an outage.
func BadInput(t *testing.T, c *dlm.Client) {
	t.Helper()
	ctx := Context(t)
	cases := []struct {
		name     string
		resource string
		opts     []dlm.Option
	}{
		{"empty name", "", nil},
		{"long name", strings.Repeat("x", dlm.MaxResourceBytes+1), nil},
		{"NUL in name", "a\x00b", nil},
		{"control character in name", "line\nbreak", nil},
		{"bidirectional override in name", "invoice\u202Efdp.exe", nil},
		{"invalid UTF-8", "a\xffb", nil},
		{"zero TTL", "r", []dlm.Option{dlm.WithTTL(0)}},
		{"tiny TTL", "r", []dlm.Option{dlm.WithTTL(time.Microsecond)}},
		{"absurd TTL", "r", []dlm.Option{dlm.WithTTL(48 * time.Hour)}},
		{"negative wait", "r", []dlm.Option{dlm.WithWait(-time.Second)}},
		{"unknown mode", "r", []dlm.Option{dlm.WithMode(dlm.Mode(42))}},
		{"long metadata", "r", []dlm.Option{dlm.WithMetadata(strings.Repeat("m", dlm.MaxMetadataBytes+1))}},
		{"max hold below TTL", "r", []dlm.Option{dlm.WithTTL(time.Second), dlm.WithMaxHold(500 * time.Millisecond)}},
		{"nil retry", "r", []dlm.Option{dlm.WithRetry(nil)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Acquire(ctx, tc.resource, tc.opts...)
			if !errors.Is(err, dlm.ErrInvalid) || errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrInvalid only", err)
			}
		})
	}
}

// StaleHolderSparesSuccessor takes the lock on a fresh resource as A (a
// try-lock with a TTL of ttl), has lose take it from A behind A's back and
// leave it free (expiry, revocation), and takes it as B (a try-lock). A's
// Extend and Release must then fail with ErrLost and leave B holding, and B's
// token must be above A's. It returns A.Extend's error, for the store's own
// checks.
func StaleHolderSparesSuccessor(t *testing.T, c *dlm.Client, ttl time.Duration, lose func(a *dlm.Lease)) error {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	a, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	lose(a)
	b, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("B after A lost the lock: %v", err)
	}
	defer b.Release(ctx)
	extendErr := a.Extend(ctx)
	if !errors.Is(extendErr, dlm.ErrLost) {
		t.Fatalf("A.Extend = %v, want ErrLost", extendErr)
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
	return extendErr
}

// NoGoroutineLeak runs workers concurrent Do calls on one fresh resource,
// then a wait that times out behind a holder, then closeStore (if not nil),
// and checks that no goroutine that Goroutines(marks...) counts is left
// (waiting up to 10 s: a loaded machine is slow to unwind).
func NoGoroutineLeak(t *testing.T, c *dlm.Client, workers int, closeStore func(), marks ...string) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			if err := c.Do(ctx, name, func(context.Context, *dlm.Lease) error { return nil }, dlm.WithTTL(5*time.Second)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = c.Acquire(wctx, name)
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if closeStore != nil {
		closeStore()
	}
	Await(t, 10*time.Second, "goroutines to settle", func() bool { return Goroutines(marks...) == 0 })
}

// RenewalHoldsPastTTL holds the lock on a fresh resource with Do, which
// renews it, for hold (several TTLs of ttl); a try-lock must then still fail
// with ErrNotAcquired. A renewal comes every ttl/3 and must land before the
// deadline: pass a ttl of a couple of seconds, so that a loaded machine,
// which may hold a goroutine or a server back for a second, does not lose
// the lease for the test.
func RenewalHoldsPastTTL(t *testing.T, c *dlm.Client, ttl, hold time.Duration) {
	t.Helper()
	name := Resource(t)
	err := c.Do(Context(t), name, func(ctx context.Context, l *dlm.Lease) error {
		timer := time.NewTimer(hold)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-timer.C:
		}
		// Nobody else can take it now.
		if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Errorf("second Acquire after %s (TTL %s) = %v, want ErrNotAcquired", hold, ttl, err)
		}
		return nil
	}, dlm.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
}

// UnavailableIsNotContention checks, with the store's server down, that a
// try-lock and a wait of 200 ms, on fresh resources, both fail with
// ErrUnavailable only, never ErrNotAcquired; and that a call without a wait
// gives up after its unavailable timeout (500 ms) with an error that says
// so, long before its context ends.
func UnavailableIsNotContention(t *testing.T, c *dlm.Client) {
	t.Helper()
	ctx := Context(t)
	for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
		_, err := c.Acquire(ctx, Resource(t), dlm.WithWait(wait))
		if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("wait %s on a dead server = %v, want ErrUnavailable only", wait, err)
		}
	}
	_, err := c.Acquire(ctx, Resource(t), dlm.WithUnavailableTimeout(500*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) || ctx.Err() != nil {
		t.Fatalf("no wait on a dead server = %v (context: %v), want ErrUnavailable only, before the context ends", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), "unreachable for 500ms") {
		t.Fatalf("no wait on a dead server = %v, want it to say for how long the store was unreachable", err)
	}
}

// LongestNameAccepted checks that a name of dlm.MaxResourceBytes, the
// longest BadInput does not refuse, is locked and released.
func LongestNameAccepted(t *testing.T, c *dlm.Client) {
	t.Helper()
	ctx := Context(t)
	l, err := c.Acquire(ctx, strings.Repeat("n", dlm.MaxResourceBytes), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("a name of MaxResourceBytes: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

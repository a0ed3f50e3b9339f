package postgres_test

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/postgres"
)

func TestMutualExclusion(t *testing.T) {
	e := newEnv(t)
	c1, _ := e.client()
	c2, _ := e.client()
	name := storetest.MutualExclusionWith(t, []*dlm.Client{c1, c2}, 16, 12, func(i int) []dlm.Option {
		if i%3 == 0 {
			// Mix try-locks with retries into the waits.
			return []dlm.Option{dlm.WithTTL(5 * time.Second), dlm.WithWait(30 * time.Second), dlm.WithRetry(dlm.LinearBackoff(time.Millisecond))}
		}
		return []dlm.Option{dlm.WithTTL(5 * time.Second)}
	})
	if n := e.locks(name, true) + e.locks(name, false); n != 0 {
		t.Fatalf("%d locks left after every holder released", n)
	}
}

func TestSharedReadersAndWriter(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	storetest.SharedReadersExclusiveWriter(t, c, e.waiting, func(name string) int { return e.locks(name, true) }, false)
}

func TestLostWhenBackendTerminated(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	var name string
	storetest.LossEndsDo(t, c, 3*time.Second, func(l *dlm.Lease) {
		name = l.Resource()
		if n := e.terminate(name); n != 1 {
			t.Errorf("terminated %d backends, want 1", n)
		}
	})
	// The server freed the lock with the session.
	storetest.Free(t, c, name, "its session ended")
}

func TestTokensStrictlyIncrease(t *testing.T) {
	e := newEnv(t)
	c1, _ := e.client()
	c2, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var last uint64
	for i := range 30 {
		c, mode := c1, dlm.EX
		if i%2 == 1 {
			c = c2
		}
		if i%3 == 0 {
			mode = dlm.PR
		}
		l, err := c.Acquire(ctx, name, dlm.WithMode(mode), dlm.WithWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("grant %d: token %d is not above the previous %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServerDownAndRestart(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 600 * time.Millisecond
	k := storetest.NewTokens(t, c, dlm.WithTTL(ttl), dlm.WithWait(30*time.Second))
	for range 5 {
		k.Next("before the crash", name).Release(ctx)
	}

	// A held, renewing lease is lost when the server dies: the session
	// is gone, and the lock with it.
	held := k.Next("a renewing lease", name, dlm.WithAutoRenew(true))
	e.srv.Kill()
	// By its deadline, at most one TTL away; the check leaves a loaded
	// machine slack, and the time taken is logged.
	took := storetest.Within(t, held.Lost(), ttl+10*time.Second, "Lost after the server died")
	t.Logf("Lost %s after the server died (TTL %s)", took, ttl)
	if !errors.Is(held.Err(), dlm.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", held.Err())
	}

	// A dead server is an outage, never contention.
	storetest.UnavailableIsNotContention(t, c)

	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The last grant's sequence advance was made durable before its token
	// was returned, so a crash right after it cannot hand it out again.
	crashed := k.Next("after the restart", name)
	e.srv.Kill()
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	k.Next("after a crash right after a grant", name).Release(ctx)
	if err := crashed.Release(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Release of a lease whose server crashed = %v, want ErrLost", err)
	}
}

// TestTokenDurableAcrossCrash checks every grant statement, without
// waiting and waiting, with and without a holder row: a crash right after a
// grant never hands its token out again. The server runs with
// synchronous_commit off, so only the grant statement's own durability
// keeps the sequence's advance.
func TestTokenDurableAcrossCrash(t *testing.T) {
	e := ownEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var last uint64
	for _, step := range []struct {
		what string
		opts []dlm.Option
	}{
		{"without waiting", []dlm.Option{dlm.WithWait(0)}},
		{"without waiting, with metadata", []dlm.Option{dlm.WithWait(0), dlm.WithMetadata("host-1")}},
		{"waiting, with metadata", []dlm.Option{dlm.WithWait(30 * time.Second), dlm.WithMetadata("host-1")}},
		{"after the last crash", []dlm.Option{dlm.WithWait(0)}},
	} {
		c, p := e.client()
		l, err := c.Acquire(ctx, name, step.opts...)
		if err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d is not above %d, granted before the crash", step.what, l.Token(), last)
		}
		last = l.Token()
		e.srv.Kill()
		if err := e.srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); !errors.Is(err, dlm.ErrLost) {
			t.Fatalf("%s: Release after a crash = %v, want ErrLost", step.what, err)
		}
		p.Reset() // its connections died with the server
	}
}

func TestReleaseAndExtend(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("Extend of a held lock: %v", err)
	}
	if n := e.locks(name, true); n != 1 {
		t.Fatalf("%d granted locks in pg_locks, want 1", n)
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
	if n := e.locks(name, true); n != 0 {
		t.Fatalf("%d locks left after Release", n)
	}
	// Released connections go back to the pool and are reused.
	made := pool.Stat().NewConnsCount()
	for range 10 {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	if n := pool.Stat().NewConnsCount(); n != made {
		t.Fatalf("sequential locks made %d new connections", n-made)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

func TestExplicitKey(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	const k = 4200 + 17
	l, err := c.Acquire(ctx, postgres.Key(k), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	var got bool
	if err := e.admin.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(k)).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got {
		t.Fatal("pg_try_advisory_lock(k) succeeded while postgres.Key(k) is held")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestKeyOf(t *testing.T) {
	// The mapping must never change: other processes, builds and versions
	// lock the same names.
	golden := map[string]int64{
		"orders/42": 337057424109631821, // SHA-256("dlm\x00orders/42")[:8]
		"pgkey:-7":  -7,
		"pgkey:0":   0,
	}
	for name, want := range golden {
		if got := postgres.KeyOf(name); got != want {
			t.Errorf("KeyOf(%q) = %d, want %d", name, got, want)
		}
	}
	for _, name := range []string{"pgkey:042", "pgkey:+1", "pgkey:", "pgkey:9223372036854775808", "pgkey:1 "} {
		if k := postgres.KeyOf(name); k >= -1000 && k <= 1000 {
			t.Errorf("KeyOf(%q) = %d: a non-canonical key name must hash", name, k)
		}
	}
	if postgres.Key(-9223372036854775808) != "pgkey:-9223372036854775808" || postgres.KeyOf(postgres.Key(-9223372036854775808)) != -9223372036854775808 {
		t.Error("Key does not round-trip the smallest int64")
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	ctx := storetest.Context(t)
	storetest.BadInput(t, c)
	for _, m := range []dlm.Mode{dlm.NL, dlm.CR, dlm.CW, dlm.PW} {
		_, err := c.Acquire(ctx, "r", dlm.WithMode(m))
		if !errors.Is(err, dlm.ErrUnsupported) || errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
			t.Fatalf("mode %s: err = %v, want ErrUnsupported only", m, err)
		}
	}
	if _, err := c.Acquire(ctx, "r", dlm.WithSemaphore(3, 1)); !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("semaphore: err = %v, want ErrUnsupported", err)
	}
	for _, tc := range []struct {
		name string
		s    *postgres.Store
	}{
		{"nil pool", newStore(t, nil)},
		{"empty sequence", newStore(t, pool, postgres.WithSequence(""))},
		{"three-part sequence", newStore(t, pool, postgres.WithSequence("a.b.c"))},
		{"empty schema", newStore(t, pool, postgres.WithSequence(".fence"))},
		{"long sequence", newStore(t, pool, postgres.WithSequence(strings.Repeat("s", 64)))},
	} {
		if _, err := dlm.New(tc.s).Acquire(ctx, "r", dlm.WithWait(0)); !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	// Odd names are fine: they are hashed. (Control characters are refused
	// by package dlm before any store: see storetest.BadInput.)
	for _, name := range []string{"'; DROP TABLE x; --", "pgkey:x", "\u00a0nbsp", strings.Repeat("é", 256)} {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		l.Release(ctx)
	}
}

func TestSetupAndSequence(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)

	// Without setup and without the sequence, a grant fails as a whole
	// and leaves no lock behind on the pooled connection.
	p := e.pool(2)
	seq := "missing_fence_" + path.Base(storetest.Resource(t)) // unique in this run
	bare := newStore(t, p, postgres.WithSetup(false), postgres.WithSequence(seq))
	_, err := dlm.New(bare).Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrUnavailable) || !strings.Contains(err.Error(), seq) {
		t.Fatalf("err = %v, want ErrUnavailable naming the sequence", err)
	}
	if n := e.locks(name, true); n != 0 {
		t.Fatalf("%d locks left by a failed grant", n)
	}
	if err := bare.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := dlm.New(bare).Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("after Setup: %v", err)
	}
	if l.Token() != 1 {
		t.Fatalf("first token of a new sequence = %d, want 1", l.Token())
	}
	l.Release(ctx)

	// A schema-qualified sequence, set up concurrently by several stores.
	if _, err := e.admin.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "lock space"`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newStore(t, p, postgres.WithSequence(`lock space.Fence "q"`))
			if err := s.Setup(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c := dlm.New(newStore(t, p, postgres.WithSequence(`lock space.Fence "q"`)))
	l, err = c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}

func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t)
	s := postgres.New(e.pool(24))
	// The shared sessions' goroutines end with the store.
	closeStore := func() { _ = s.Close(context.Background()) }
	storetest.NoGoroutineLeak(t, dlm.New(s), 6, closeStore, "github.com/dlmhq/dlm.", "github.com/dlmhq/dlm/postgres.")
}

func TestStoreEnforcesTTL(t *testing.T) {
	e := newEnv(t)
	c, pool := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 100 * time.Millisecond
	// Acquire does not renew: the lease expires, and the store must not let
	// the session hold the lock on (dlm does not release a lost lease).
	l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	storetest.Within(t, l.Lost(), ttl+10*time.Second, "the lease's expiry")
	next, err := c.Acquire(ctx, name, dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("lock not freed after its TTL: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Release of the expired lease = %v, want ErrLost", err)
	}
	if err := next.Extend(ctx); err != nil {
		t.Fatalf("the new holder's Extend = %v", err)
	}
	next.Release(ctx)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}

	// A renewing lease keeps the lock well past its TTL (a longer one, which
	// a late renewal on a loaded machine does not miss).
	storetest.RenewalHoldsPastTTL(t, c, 2*time.Second, 5*time.Second)
}

func TestElection(t *testing.T) {
	c, _ := newEnv(t).client(postgres.WithWatchInterval(50 * time.Millisecond))
	storetest.Election(t, c, true)
}

// The store keeps one timer for the expiries of all its locks: a short TTL
// taken after a long one expires in time, and the expiry of a released lock
// leaves the others alone.
func TestExpiriesInOrder(t *testing.T) {
	e := newEnv(t)
	s := newStore(t, e.pool(4))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	take := func(suffix string, ttl time.Duration) (driver.Request, driver.Grant) {
		t.Helper()
		req := request(name+suffix, "a")
		req.TTL = ttl
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return req, g
	}
	long, lg := take("/long", time.Hour)
	released, rg := take("/released", 50*time.Millisecond)
	if err := s.Release(ctx, released, rg); err != nil {
		t.Fatal(err)
	}
	short, sg := take("/short", 100*time.Millisecond)
	storetest.Await(t, 10*time.Second, "the short TTL's lock to be unlocked", func() bool { return e.locks(short.Resource, true) == 0 })
	if err := s.Extend(ctx, short, sg); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Extend of the expired lock = %v, want ErrNotHeld", err)
	}
	if n := e.locks(long.Resource, true); n != 1 {
		t.Fatalf("the long TTL's lock: %d holders after the short one expired, want 1", n)
	}
	if err := s.Extend(ctx, long, lg); err != nil {
		t.Fatalf("Extend of the long TTL's lock = %v", err)
	}
	if err := s.Release(ctx, long, lg); err != nil {
		t.Fatal(err)
	}
}

func TestCancellation(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	checker, _ := e.client()
	storetest.Cancellation(t, c, checker, storetest.Cancels{Elections: true})
}

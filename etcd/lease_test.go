package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

func TestAutoRenewHoldsPastTTL(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	const ttl = 600 * time.Millisecond // a 1 s lease, which etcd raises to its minimum
	err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
		// Longer than the lease etcd granted: renewals keep it.
		hold := time.NewTimer(3 * time.Second)
		defer hold.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-hold.C:
		}
		if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Errorf("second Acquire after 3 s: %v, want ErrNotAcquired", err)
		}
		return nil
	}, dlm.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeaseTTLRoundsUp(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	for _, tc := range []struct {
		ttl     time.Duration
		atLeast int64
	}{
		{10 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{3 * time.Second, 3},
		{3001 * time.Millisecond, 4},
	} {
		l, err := c.Acquire(ctx, resource(t), dlm.WithTTL(tc.ttl), dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		id := e.leaseOf(l)
		resp, err := e.raw.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL < tc.atLeast || resp.GrantedTTL > max(tc.atLeast, 2) {
			t.Errorf("TTL %s: lease of %d s, want %d s (or etcd's minimum)", tc.ttl, resp.GrantedTTL, tc.atLeast)
		}
		if l.Release(ctx) != nil {
			continue // lost at its deadline already, as a 10 ms lease is
		}
		if resp, _ := e.raw.TimeToLive(ctx, id); resp != nil && resp.TTL != -1 {
			t.Errorf("lease still alive after release: TTL %d", resp.TTL)
		}
	}
}

func TestLostWhenLeaseRevoked(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	const ttl = 600 * time.Millisecond
	bound := ttl/3 + 300*time.Millisecond // a renewal, plus slack for -race
	var cause error
	err := c.Do(ctx, name, func(ctx context.Context, l *dlm.Lease) error {
		e.revoke(l)
		within(t, ctx.Done(), bound, "Do's context cancellation")
		cause = context.Cause(ctx)
		return ctx.Err()
	}, dlm.WithTTL(ttl))
	if !errors.Is(cause, dlm.ErrLost) || !errors.Is(cause, dlm.ErrNotHeld) {
		t.Fatalf("cause = %v, want ErrLost from a failed owner check", cause)
	}
	if !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
}

func TestLostWhenEtcdDies(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client(etcdTimeout)
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
	within(t, l.Lost(), 2*ttl, "Lost after etcd died")
	if late := time.Since(deadline); late > ttl+200*time.Millisecond {
		t.Fatalf("Lost fired %s after the first deadline; the bound is one TTL", late)
	}
	if !errors.Is(l.Err(), dlm.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
}

func TestReleaseDoesNotTouchALaterGrant(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	a, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	e.revoke(a) // as if A's lease had expired
	b, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	if err := a.Extend(ctx); !errors.Is(err, dlm.ErrLost) || !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("A.Extend = %v, want ErrLost and ErrNotHeld", err)
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

func TestTokensStrictlyIncrease(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	var last uint64
	next := func(what, name string) *dlm.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, name, dlm.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d is not above the previous %d", what, l.Token(), last)
		}
		last = l.Token()
		return l
	}
	for range 10 {
		next("sequential", name).Release(ctx)
	}
	next("another resource", name+"/other").Release(ctx)
	l := next("before revoke", name)
	e.revoke(l)
	next("after the lease was revoked", name).Release(ctx)
	e.srv.Kill()
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	next("after a restart", name).Release(ctx)
}

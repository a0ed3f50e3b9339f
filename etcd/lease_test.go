package etcd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestAutoRenewHoldsPastTTL(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	// A 2 s lease (or etcd's minimum) held longer than the lease etcd
	// granted: renewals keep it.
	storetest.RenewalHoldsPastTTL(t, c, 2*time.Second, 5*time.Second)
}

func TestLeaseTTLRoundsUp(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	for _, tc := range []struct {
		ttl     time.Duration
		atLeast int64
	}{
		{10 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{3 * time.Second, 3},
		{3001 * time.Millisecond, 4},
	} {
		// Through the store, which keeps the key for its etcd lease: package
		// dlm would release a 10 ms lease at its deadline, often before its
		// etcd lease could be looked at.
		req := request(storetest.Resource(t), "f")
		req.TTL = tc.ttl
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := e.leaseOf(g.Token)
		resp, err := e.raw.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GrantedTTL < tc.atLeast || resp.GrantedTTL > max(tc.atLeast, 2) {
			t.Errorf("TTL %s: lease of %d s, want %d s (or etcd's minimum)", tc.ttl, resp.GrantedTTL, tc.atLeast)
		}
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatalf("TTL %s: Release = %v", tc.ttl, err)
		}
		if keys := e.keys(req.Resource); len(keys) != 0 {
			t.Errorf("TTL %s: keys left after release: %q", tc.ttl, keys)
		}
		// The lease is the session's, for the next request of that TTL.
		if resp, err := e.raw.TimeToLive(ctx, id); err != nil || resp.TTL <= 0 {
			t.Errorf("TTL %s: the session lease ended with the release: %v, %v", tc.ttl, resp, err)
		}
	}
}

func TestLostWhenLeaseRevoked(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	// The session's keep-alive (etcd has no such lease) or the renewal's
	// owner check, whichever comes first, ends the lease: LossEndsDo
	// checks that it is ErrLost, before the lease's deadline.
	storetest.LossEndsDo(t, c, 3*time.Second, e.revoke)
}

func TestLostWhenEtcdDies(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client(etcdTimeout)
	storetest.LostWhenServerDies(t, c, e.srv.Kill)
}

func TestReleaseDoesNotTouchALaterGrant(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	err := storetest.StaleHolderSparesSuccessor(t, c, 5*time.Second, e.revoke) // as if A's lease had expired
	if !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("A.Extend = %v, want ErrLost and ErrNotHeld", err)
	}
}

func TestTokensStrictlyIncrease(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	k := storetest.NewTokens(t, c, dlm.WithWait(10*time.Second))
	for range 10 {
		k.Next("sequential", name).Release(ctx)
	}
	k.Next("another resource", name+"/other").Release(ctx)
	l := k.Next("before revoke", name)
	e.revoke(l)
	k.Next("after the lease was revoked", name).Release(ctx)
	e.srv.Kill()
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	k.Next("after a restart", name).Release(ctx)
}

// A release deletes the grant's key even when it was created again since
// the grant (only an earlier attempt of the same request, delayed, could
// write it), and says the lock was not held.
func TestReleaseOfAKeyCreatedAgain(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	keys := e.keys(name)
	if len(keys) != 1 {
		t.Fatalf("keys = %q, want the holder's only", keys)
	}
	if _, err := e.raw.Delete(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Put(ctx, keys[0], "EX\n"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, dlm.ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrNotHeld", err)
	}
	if keys := e.keys(name); len(keys) != 0 {
		t.Fatalf("keys = %q after the release, want none", keys)
	}
}

// One client's acquisitions of one resource reuse their keys: a released
// key's slot is taken by the next request, and requests that are queued at
// once take slots of their own. (A key per acquisition would leave etcd one
// dead key per cycle in its index until compaction, and every read of the
// queue would walk them all.)
func TestKeysAreReused(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var first string
	for i := range 5 {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		keys := e.keys(name)
		if len(keys) != 1 {
			t.Fatalf("cycle %d: keys %q, want one", i, keys)
		}
		if first == "" {
			first = keys[0]
		} else if keys[0] != first {
			t.Fatalf("cycle %d used key %q, the first used %q", i, keys[0], first)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holder, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	got := storetest.Acquiring(ctx, t, c, name, dlm.WithWait(time.Minute))
	storetest.Await(t, 5*time.Second, "the waiter queued", func() bool { return e.waiting(name) == 1 })
	keys := e.keys(name)
	if keys[0] != first || keys[1] == first {
		t.Fatalf("holder and waiter have keys %q; want the holder on %q and the waiter on another", keys, first)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := e.keys(name); len(keys) != 0 {
		t.Fatalf("keys %q left after every release", keys)
	}
}

package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// held is n grants of one store on distinct resources.
type held struct {
	reqs   []driver.Request
	grants []driver.Grant
}

func acquireMany(t *testing.T, s *etcd.Store, n int) held {
	t.Helper()
	ctx := storetest.Context(t)
	var h held
	for i := range n {
		req := request(fmt.Sprintf("%s-%d", storetest.Resource(t), i), fmt.Sprint(i%10))
		req.TTL = time.Minute // the session outlives a stopped etcd
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		h.reqs, h.grants = append(h.reqs, req), append(h.grants, g)
	}
	return h
}

// revision returns etcd's current revision.
func (e *env) revision() int64 {
	e.t.Helper()
	resp, err := e.raw.Get(context.Background(), "revision")
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

// releaseTogether stops etcd, starts the releases of h, waits until all
// but the first (in flight) wait for it, lets etcd go on, checks that no
// key is left, and returns each release's error and how many revisions
// etcd made for them.
func releaseTogether(t *testing.T, e *env, s *etcd.Store, h held) ([]error, int64) {
	t.Helper()
	before := e.revision()
	pid := e.srv.PID()
	if err := testenv.Freeze(pid); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = testenv.Thaw(pid)
		}
	}
	defer resume()
	errs := make([]error, len(h.reqs))
	var wg sync.WaitGroup
	for i := range h.reqs {
		wg.Go(func() { errs[i] = s.Release(storetest.Context(t), h.reqs[i], h.grants[i]) })
	}
	storetest.Await(t, 4*time.Second, "all but one release waiting", func() bool { return etcd.PendingDeletes(s) == len(h.reqs)-1 })
	resume()
	wg.Wait()
	for _, req := range h.reqs {
		if keys := e.keys(req.Resource); len(keys) != 0 {
			t.Errorf("%s: keys %q left after the releases", req.Resource, keys)
		}
	}
	return errs, e.revision() - before
}

// Releases that come while one is in flight go to etcd in one transaction
// (one revision for all), and each learns whether its key was its grant's.
func TestReleasesTogether(t *testing.T) {
	e := ownEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	h := acquireMany(t, s, 16)
	// One key deleted and created again by someone else: its release
	// deletes it and says the lock was not held.
	again := e.keys(h.reqs[7].Resource)
	if _, err := e.raw.Delete(ctx, again[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Put(ctx, again[0], "EX\n"); err != nil {
		t.Fatal(err)
	}
	errs, revisions := releaseTogether(t, e, s, h)
	for i, err := range errs {
		if want := i == 7; errors.Is(err, driver.ErrNotHeld) != want || (!want && err != nil) {
			t.Errorf("release %d = %v", i, err)
		}
	}
	if revisions != 2 {
		t.Errorf("etcd made %d revisions for 16 releases, want 2: one delete, then one transaction of 15", revisions)
	}
	// Alone again, a release is one delete.
	one := acquireMany(t, s, 1)
	before := e.revision()
	if err := s.Release(ctx, one.reqs[0], one.grants[0]); err != nil {
		t.Fatal(err)
	}
	if n := e.revision() - before; n != 1 {
		t.Errorf("a lone release made %d revisions", n)
	}
}

// A server that allows fewer operations per transaction than the store
// puts in one (etcd's --max-txn-ops) gets the deletes one by one.
func TestReleasesTogetherBeyondMaxTxnOps(t *testing.T) {
	t.Setenv("ETCD_MAX_TXN_OPS", "4")
	e := ownEnv(t)
	_, s := e.client()
	h := acquireMany(t, s, 8)
	errs, revisions := releaseTogether(t, e, s, h)
	if err := errors.Join(errs...); err != nil {
		t.Errorf("releases: %v", err)
	}
	if revisions != 8 {
		t.Errorf("etcd made %d revisions for 8 releases, want 8 (the transaction refused)", revisions)
	}
}

// A release whose context ends while it waits for the delete in flight
// returns the context's error; its key is deleted all the same.
func TestReleaseWaitingEndsWithItsContext(t *testing.T) {
	e := ownEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	h := acquireMany(t, s, 2)
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	pid := e.srv.PID()
	if err := testenv.Freeze(pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Thaw(pid) })
	first := make(chan error, 1)
	go func() { first <- s.Release(ctx, h.reqs[0], h.grants[0]) }()
	storetest.Await(t, 4*time.Second, "a release in flight", func() bool { return etcd.DeleteInFlight(s) })
	waiting := make(chan error, 1)
	go func() { waiting <- s.Release(short, h.reqs[1], h.grants[1]) }()
	storetest.Await(t, 4*time.Second, "the second release waiting", func() bool { return etcd.PendingDeletes(s) == 1 })
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Errorf("the waiting release = %v, want context.Canceled", err)
	}
	if err := testenv.Thaw(pid); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Errorf("the release in flight = %v", err)
	}
	storetest.Await(t, 5*time.Second, "the waiting release's key deleted", func() bool { return len(e.keys(h.reqs[1].Resource)) == 0 })
}

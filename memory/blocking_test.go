package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestFeatures(t *testing.T) {
	s := newStore(t)
	for _, f := range []driver.Feature{driver.FeatureSemaphores, driver.FeatureBlocking, driver.FeatureDeadlocks} {
		if !driver.Has(s, f) {
			t.Errorf("feature %d not declared", f)
		}
	}
}

// TestBlockingExclusive: an EX holder is told when an EX request, made
// through package dlm, queues behind it.
func TestBlockingExclusive(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	hreq := lockReq("r", driver.EX, "")
	h := mustAcquire(t, s, hreq)
	if h.Blocking == nil || closed(h.Blocking) {
		t.Fatal("a fresh grant's Blocking is nil or closed")
	}
	type acquired struct {
		l   *dlm.Lease
		err error
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := dlm.New(s).Acquire(ctx, "r", dlm.WithWait(time.Minute))
		got <- acquired{l, err}
	}()
	storetest.Closes(t, h.Blocking, within, "the holder's Blocking, an EX waiting behind it")
	if err := s.Release(ctx, hreq, h); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if err := a.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBlockingToldAtGrant: a request granted from the queue while another
// that it blocks waits behind it gets a Blocking channel already closed.
func TestBlockingToldAtGrant(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	hreq := lockReq("r", driver.EX, "")
	h := mustAcquire(t, s, hreq)
	breq, creq := lockReq("r", driver.EX, ""), lockReq("r", driver.EX, "")
	wb := goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, breq) })
	storetest.Closes(t, h.Blocking, within, "the holder's Blocking")
	wc := goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, creq) })
	// Both queued: the second queued request changes the resource's
	// waiters, which a watch sees.
	watchUntil(t, s, "r", func() bool { return s.Waiting("r") == 2 })
	if err := s.Release(ctx, hreq, h); err != nil {
		t.Fatal(err)
	}
	gb, err := wb.result(t)
	if err != nil {
		t.Fatal(err)
	}
	if !closed(gb.Blocking) {
		t.Fatal("granted with a conflicting request queued behind, but Blocking is open")
	}
	if err := s.Release(ctx, breq, gb); err != nil {
		t.Fatal(err)
	}
	if _, err := wc.result(t); err != nil {
		t.Fatal(err)
	}
}

// TestBlockingSharedIsNotTold: PR beside PR blocks nobody; an EX waiter
// then tells both readers.
func TestBlockingSharedIsNotTold(t *testing.T) {
	s := newStore(t)
	a := mustAcquire(t, s, lockReq("r", driver.PR, ""))
	b := mustAcquire(t, s, lockReq("r", driver.PR, ""))
	if closed(a.Blocking) || closed(b.Blocking) {
		t.Fatal("a PR holder was told a PR request blocks on it")
	}
	ex := lockReq("r", driver.EX, "")
	goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, ex) })
	storetest.Closes(t, a.Blocking, within, "the first reader's Blocking")
	storetest.Closes(t, b.Blocking, within, "the second reader's Blocking")
}

// TestBlockingSemaphore: a semaphore holder is told when a request that
// does not fit queues, not when one fits.
func TestBlockingSemaphore(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	sem := func() driver.Request {
		return driver.Request{Resource: "s", Owner: newID(), TTL: time.Minute, Capacity: 2, Permits: 1}
	}
	a := mustAcquire(t, s, sem())
	b, err := s.AcquireWait(ctx, sem())
	if err != nil {
		t.Fatal(err)
	}
	if closed(a.Blocking) || closed(b.Blocking) {
		t.Fatal("a holder was told about a request that fitted")
	}
	creq := sem()
	goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, creq) })
	storetest.Closes(t, a.Blocking, within, "the first holder's Blocking")
	storetest.Closes(t, b.Blocking, within, "the second holder's Blocking")
}

// TestBlockingAfterConvert: a conversion that changes the mode returns a
// fresh channel (closed at once if the new mode still blocks a waiter); one
// to the same mode returns the same channel.
func TestBlockingAfterConvert(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	req := lockReq("r", driver.PR, "")
	g := mustAcquire(t, s, req)
	up, err := s.Convert(ctx, req, g, driver.EX)
	if err != nil {
		t.Fatal(err)
	}
	if up.Blocking == g.Blocking || closed(up.Blocking) {
		t.Fatal("an up-conversion kept its channel, or got a closed one with nobody waiting")
	}
	same, err := s.Convert(ctx, req, up, driver.EX)
	if err != nil {
		t.Fatal(err)
	}
	if same.Blocking != up.Blocking {
		t.Fatal("a conversion to the same mode changed the channel")
	}
	w := lockReq("r", driver.EX, "")
	goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, w) })
	storetest.Closes(t, up.Blocking, within, "the EX holder's Blocking")
	down, err := s.Convert(ctx, req, up, driver.PR)
	if err != nil {
		t.Fatal(err)
	}
	if down.Blocking == up.Blocking {
		t.Fatal("a down-conversion kept its channel")
	}
	if !closed(down.Blocking) {
		t.Fatal("converted to PR with an EX waiting behind, but Blocking is open")
	}
	if again, err := s.Acquire(ctx, req); err != nil || again.Blocking != down.Blocking {
		t.Fatalf("retried acquire = %v, %v: want the held grant's channel", again.Blocking, err)
	}
}

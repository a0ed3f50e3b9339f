package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
)

// watched asks for g's Blocking channel as Lease.Blocking does: it starts
// the store's watch, if the grant has one to start.
func watched(g driver.Grant) <-chan struct{} {
	if g.WatchBlocking != nil {
		g.WatchBlocking()
	}
	return g.Blocking
}

// open fails the test if ch is closed now.
func open(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	if ch == nil {
		t.Fatalf("%s: no Blocking channel", what)
	}
	select {
	case <-ch:
		t.Fatalf("%s: Blocking is closed", what)
	default:
	}
}

func TestBlockingClosedByAConflictingWaiter(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	if !driver.Has(s, driver.FeatureBlocking) {
		t.Fatal("FeatureBlocking not declared")
	}
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder := request(name, "a")
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	open(t, watched(g), "a free resource")

	// A client that waits, as package dlm does.
	got := storetest.Acquiring(ctx, t, c, name)
	storetest.Within(t, g.Blocking, 10*time.Second, "Blocking after a writer queued")
	if err := s.Release(ctx, holder, g); err != nil {
		t.Fatal(err)
	}
	if l := <-got; l != nil {
		l.Release(ctx)
	}
}

func TestBlockingSharedHolders(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	first := request(name, "a")
	first.Mode = driver.PR
	g1, err := s.Acquire(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, first, g1)
	second := request(name, "b")
	second.Mode = driver.PR
	g2, err := s.Acquire(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, second, g2)
	open(t, watched(g1), "a reader behind a reader")
	open(t, watched(g2), "a second reader")

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Acquire(wctx, name) // a writer; ends with the test
	storetest.Within(t, g1.Blocking, 10*time.Second, "the first reader's Blocking")
	storetest.Within(t, g2.Blocking, 10*time.Second, "the second reader's Blocking")
}

func TestBlockingIgnoresCompatibleRequests(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	reader := request(name, "a")
	reader.Mode = driver.PR
	g, err := s.Acquire(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []driver.Mode{driver.PR, driver.CR, driver.NL} {
		req := request(name, m.String())
		req.Mode = m
		gm, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx, req, gm)
	}
	// The reader's key goes without Release: the watch sees the
	// compatible requests, then the deletion, and ends.
	if _, err := e.raw.Revoke(ctx, e.leaseOf(g.Token)); err != nil {
		t.Fatal(err)
	}
	if etcd.WatchBehind(ctx, s, reader, g, int64(g.Token)) {
		t.Fatal("compatible requests count as blocking")
	}
}

func TestBlockingRetriedGrant(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder := request(name, "a")
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, holder, g)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.AcquireWait(wctx, request(name, "b")) // ends with the test
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })
	// The holder's attempt again, as after a lost reply: the same grant,
	// which a writer already waits for.
	again, err := s.Acquire(ctx, holder)
	if err != nil || again.Token != g.Token {
		t.Fatalf("retried attempt: %+v, %v; want token %d", again, err, g.Token)
	}
	select {
	case <-again.Blocking:
	default:
		t.Fatal("a retried grant with a writer behind it is not blocking")
	}
}

func TestBlockingAfterAWait(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	first := request(name, "a")
	g1, err := s.Acquire(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// b waits behind a, and c behind b: when b is granted, c already
	// waits, though b's last read of the queue stopped at its own key.
	second := request(name, "b")
	granted := make(chan driver.Grant, 1)
	go func() {
		g, err := s.AcquireWait(ctx, second)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	storetest.Await(t, 10*time.Second, "b queued", func() bool { return len(e.keys(name)) == 2 })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.AcquireWait(wctx, request(name, "c")) // ends with the test
	storetest.Await(t, 10*time.Second, "c queued", func() bool { return len(e.keys(name)) == 3 })
	if err := s.Release(ctx, first, g1); err != nil {
		t.Fatal(err)
	}
	g2 := <-granted
	defer s.Release(ctx, second, g2)
	storetest.Within(t, watched(g2), 10*time.Second, "Blocking of a grant with a waiter behind it")
}

func TestBlockingAfterCompaction(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder := request(name, "a")
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, holder, g)
	// A writer queues and leaves, another stays; then etcd forgets the
	// history since the grant.
	dir := etcd.DefaultPrefix + escaper.Replace(name) + "/"
	for _, owner := range []string{"gone", "stays"} {
		if _, err := e.raw.Put(ctx, dir+owner, "EX\n"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.raw.Delete(ctx, dir+"gone"); err != nil {
		t.Fatal(err)
	}
	defer e.raw.Delete(ctx, dir+"stays")
	compact(t, e)
	if !etcd.WatchBehind(ctx, s, holder, g, int64(g.Token)) {
		t.Fatal("the writer still waiting was not seen after the compaction")
	}

	// Once the writer left too, the watch after the compaction sees the
	// holder's key go, and ends.
	if _, err := e.raw.Delete(ctx, dir+"stays"); err != nil {
		t.Fatal(err)
	}
	compact(t, e)
	done := make(chan bool, 1)
	go func() { done <- etcd.WatchBehind(ctx, s, holder, g, int64(g.Token)) }()
	// Nothing else is queued: the watch goes on until the holder's key
	// goes.
	if _, err := e.raw.Revoke(ctx, e.leaseOf(g.Token)); err != nil {
		t.Fatal(err)
	}
	if <-done {
		t.Fatal("blocking with nobody queued")
	}
}

// compact compacts the shared etcd's history up to its current revision.
func compact(t *testing.T, e *env) {
	t.Helper()
	ctx := storetest.Context(t)
	resp, err := e.raw.Get(ctx, "compact-marker")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

func TestBlockingWatchEnds(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	marks := []string{"github.com/dlmhq/dlm/etcd.", "watchGRPCStream"}
	storetest.Await(t, 10*time.Second, "goroutines of earlier tests to end", func() bool { return storetest.Goroutines(marks...) == 0 })

	// Not asked for: no watch. (The session's keep-alive runs meanwhile.)
	watches := []string{"dlm/etcd.(*Store).watchB", "dlm/etcd.(*Store).granted", "watchGRPCStream"}
	name := storetest.Resource(t)
	req := request(name, "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := storetest.Goroutines(watches...); n != 0 {
		t.Fatalf("%d goroutines of a watch that nobody asked for", n)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	// Asked for after Release: still none.
	watched(g)
	if n := storetest.Goroutines(watches...); n != 0 {
		t.Fatalf("%d goroutines of a watch asked for after Release", n)
	}

	// Released: Release ends the watch.
	g, err = s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	watched(g)
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	storetest.Await(t, 10*time.Second, "the watch to end after Release", func() bool { return storetest.Goroutines(marks...) == 0 })

	// Lost: the key's deletion ends it.
	g, err = s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	watched(g)
	storetest.Await(t, 10*time.Second, "the watch to start", func() bool { return storetest.Goroutines(marks...) > 0 })
	if _, err := e.raw.Revoke(ctx, e.leaseOf(g.Token)); err != nil {
		t.Fatal(err)
	}
	storetest.Await(t, 10*time.Second, "the watch to end after the key's deletion", func() bool { return storetest.Goroutines(marks...) == 0 })
	open(t, g.Blocking, "a lost grant")
}

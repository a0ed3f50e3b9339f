package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// closed reports whether ch is closed (a Blocking channel carries no
// values).
func closed(ch <-chan struct{}) bool { return pending(ch) }

func TestBlockingOnRenewal(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	if !driver.Has(s, driver.FeatureBlocking) {
		t.Fatal("the store does not declare FeatureBlocking")
	}
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, time.Minute, "")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Blocking == nil || closed(g.Blocking) {
		t.Fatal("a grant nobody waits for has no open Blocking channel")
	}
	if err := s.Extend(ctx, req, g); err != nil || closed(g.Blocking) {
		t.Fatalf("Extend with nobody waiting: %v, Blocking closed %v", err, closed(g.Blocking))
	}

	// A plain Acquire through package dlm queues behind the holder; the
	// holder learns of it at its next renewal, not before.
	got := storetest.Acquiring(ctx, t, c, name, dlm.WithWait(time.Minute))
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	if closed(g.Blocking) {
		t.Fatal("Blocking closed before the holder heard of the waiter")
	}
	if err := s.Extend(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if !closed(g.Blocking) {
		t.Fatal("Extend with a waiter queued did not close Blocking")
	}
	// Closing it again is harmless.
	if err := s.Extend(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	l.Release(ctx)
}

func TestBlockingAtGrant(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	first := request(name, time.Minute, "")
	g0, err := s.Acquire(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// Two waiters: the first through the store, the second through
	// package dlm.
	second := request(name, time.Minute, "")
	granted := make(chan driver.Grant, 1)
	go func() {
		g, err := s.AcquireWait(ctx, second)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	storetest.Await(t, 10*time.Second, "first waiter queued", func() bool { return e.waiting(name) == 1 })
	got := storetest.Acquiring(ctx, t, c, name, dlm.WithWait(time.Minute))
	storetest.Await(t, 10*time.Second, "second waiter queued", func() bool { return e.waiting(name) == 2 })
	if closed(g0.Blocking) {
		t.Fatal("Blocking closed before a renewal")
	}
	if err := s.Release(ctx, first, g0); err != nil {
		t.Fatal(err)
	}
	// The first waiter's grant knows at once that the second waits.
	g1 := <-granted
	if g1.Blocking == nil || !closed(g1.Blocking) {
		t.Fatal("a grant with a waiter queued behind it has an open Blocking channel")
	}
	if err := s.Release(ctx, second, g1); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	l.Release(ctx)
}

func TestBlockingIgnoresGoneWaiters(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, time.Minute, "")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gave up left the queue.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, name, dlm.WithWait(time.Minute))
		done <- err
	}()
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	// A waiter that died in the queue: its place lapsed.
	dead := strings.Repeat("d", 32)
	now, _ := e.rdb.Time(ctx).Result()
	e.rdb.RPush(ctx, "dlm:{"+name+"}:queue", dead)
	e.rdb.ZAdd(ctx, "dlm:{"+name+"}:live", goredisZ(float64(now.UnixMilli()-1000), dead))
	if err := s.Extend(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if closed(g.Blocking) {
		t.Fatal("Blocking closed for waiters that are gone")
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
}

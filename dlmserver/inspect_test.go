package dlmserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// Inspect reads one resource by its exact name: its holders with their
// metadata, token and grant time, and its waiters.
func TestInspect(t *testing.T) {
	ctx := storetest.Context(t)
	a, b := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)

	free, err := a.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if free.Resource != name || len(free.Holders) != 0 || len(free.Waiters) != 0 {
		t.Fatalf("free resource: %+v", free)
	}

	// A lock on a longer name with this one as prefix is not this one.
	take(t, a, request(name+"/sub", driver.EX))
	if r, err := a.Inspect(ctx, name); err != nil || len(r.Holders) != 0 {
		t.Fatalf("inspect with only a longer name held: %+v, %v", r, err)
	}

	before := time.Now()
	req := request(name, driver.EX)
	req.Metadata = "leader-1"
	h := take(t, a, req)
	wreq := request(name, driver.PR)
	wreq.Metadata = "next"
	wctx, cancel := context.WithCancel(ctx)
	waiting := waitFor(wctx, b, wreq)
	defer func() {
		cancel()
		<-waiting
	}()
	storetest.Within(t, h.g.Blocking, 10*time.Second, "the waiter queued")

	r, err := b.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Resource != name || len(r.Holders) != 1 || len(r.Waiters) != 1 {
		t.Fatalf("inspect: %+v", r)
	}
	hi := r.Holders[0]
	if hi.Metadata != "leader-1" || hi.Token != h.g.Token || hi.Mode != driver.EX {
		t.Fatalf("holder %+v, want metadata leader-1, token %d, EX", hi, h.g.Token)
	}
	if hi.Since.IsZero() || hi.Since.Before(before.Add(-time.Minute)) || hi.Since.After(time.Now()) {
		t.Fatalf("holder since %v, want the grant's time (after %v)", hi.Since, before)
	}
	if w := r.Waiters[0]; w.Metadata != "next" || w.Mode != driver.PR || w.Since.IsZero() {
		t.Fatalf("waiter %+v", w)
	}

	if _, err := a.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("inspect of no name: %v, want driver.ErrInvalid", err)
	}
}

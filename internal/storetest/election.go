package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// Election runs an election on c's store with opts (a short poll interval
// for stores that poll): an observer sees nobody, then a, a's proclaimed
// value (unless the store cannot relabel), then b, who was waiting and is
// elected when a resigns, with a higher term, then nobody; Leader agrees
// at each step; terms never go backwards along Observe. With exact, the
// terms observed are the leaderships' own; without, at least those (Redlock
// reads the largest counter of the nodes that hold the lock, which may be
// above that of the quorum that granted it).
func Election(t *testing.T, c *dlm.Client, exact bool, opts ...dlm.Option) {
	t.Helper()
	ctx := Context(t)
	e := c.Election(Resource(t), opts...)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := e.Observe(octx)
	var seen []dlm.Leader
	// is reports whether ld is l's leadership with value v.
	is := func(ld dlm.Leader, l *dlm.Leadership, v string) bool {
		return ld.Value == v && (ld.Term == l.Term() || !exact && ld.Term > l.Term())
	}
	// until reads the observer until it delivers a leader for which ok holds.
	until := func(what string, ok func(dlm.Leader) bool) dlm.Leader {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ld, open := <-obs:
				if !open {
					t.Fatalf("Observe closed while waiting for %s (seen %+v)", what, seen)
				}
				if n := len(seen); n > 0 && ld.Term != 0 && ld.Term < seen[n-1].Term {
					t.Fatalf("Observe went back from term %d to %d", seen[n-1].Term, ld.Term)
				}
				seen = append(seen, ld)
				if ok(ld) {
					return ld
				}
			case <-timeout:
				t.Fatalf("Observe did not deliver %s within 30 s (seen %+v)", what, seen)
			}
		}
	}
	until("nobody leading", func(ld dlm.Leader) bool { return ld.Term == 0 })
	if _, err := e.Leader(ctx); !errors.Is(err, dlm.ErrNoLeader) {
		t.Fatalf("Leader before any campaign = %v, want ErrNoLeader", err)
	}

	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	until("a leading", func(ld dlm.Leader) bool { return is(ld, a, "a") })
	if ld, err := e.Leader(ctx); err != nil || !is(ld, a, "a") {
		t.Fatalf("Leader = %+v, %v; want a at term %d", ld, err, a.Term())
	}
	switch err := a.Proclaim(ctx, "a2"); {
	case errors.Is(err, dlm.ErrUnsupported): // a store that cannot relabel
	case err != nil:
		t.Fatal(err)
	default:
		until("a's new value", func(ld dlm.Leader) bool { return is(ld, a, "a2") })
		if ld, err := e.Leader(ctx); err != nil || ld.Value != "a2" {
			t.Fatalf("Leader after Proclaim = %+v, %v; want a2", ld, err)
		}
	}

	won := make(chan *dlm.Leadership, 1)
	go func() {
		b, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
			close(won)
			return
		}
		won <- b
	}()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b, ok := <-won
	if !ok {
		t.FailNow()
	}
	if b.Term() <= a.Term() {
		t.Fatalf("b's term %d is not above a's %d", b.Term(), a.Term())
	}
	until("b leading", func(ld dlm.Leader) bool { return is(ld, b, "b") })
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	until("nobody leading again", func(ld dlm.Leader) bool { return ld.Term == 0 })
	stop()
	for range obs { // Observe closes its channel when its context ends
	}
}

// Blocking checks Lease.Blocking on a store that declares
// driver.FeatureBlocking: with shared, a PR holder is not told of another PR
// holder; then a request queued behind the holder (EX) tells it. The holder
// renews (opts should make its TTL short on stores that tell at renewals).
func Blocking(t *testing.T, c *dlm.Client, shared bool, opts ...dlm.Option) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	mode := dlm.EX
	if shared {
		mode = dlm.PR
	}
	hold := append([]dlm.Option{dlm.WithMode(mode), dlm.WithAutoRenew(true)}, opts...)
	l, err := c.Acquire(ctx, name, hold...)
	if err != nil {
		t.Fatal(err)
	}
	if l.Blocking() == nil {
		t.Fatal("Blocking() is nil on a store that declares FeatureBlocking")
	}
	if shared {
		other, err := c.Acquire(ctx, name, hold...)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Blocking():
			t.Fatal("a compatible PR holder fired Blocking")
		default:
		}
	}
	got := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, name, append([]dlm.Option{dlm.WithMode(dlm.EX)}, opts...)...)
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	Within(t, l.Blocking(), 30*time.Second, "the blocking notice of a holder with an EX request queued behind it")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

package memory_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestListHolderAndWaitersInOrder(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 10 * time.Second
	start := time.Now()
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithMetadata("the holder"))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := storetest.Listed(t, s, name)
	if ok && len(r.Holders) == 1 && r.Holders[0].Metadata != "the holder" {
		t.Errorf("holder metadata %q, want %q", r.Holders[0].Metadata, "the holder")
	}
	if !ok || len(r.Holders) != 1 || len(r.Waiters) != 0 || r.Capacity != 0 {
		t.Fatalf("listing = %+v (listed %v), want one holder and no waiter", r, ok)
	}
	h := r.Holders[0]
	if !storetest.OwnerID.MatchString(h.Owner) || h.Mode != driver.EX || h.Token != holder.Token() || h.Permits != 0 ||
		h.TTL <= 0 || h.TTL > ttl || h.Since.Before(start.Add(-time.Millisecond)) || h.Since.After(time.Now()) {
		t.Fatalf("holder = %+v, want a 32-hex owner, EX, token %d, TTL in (0, %s], granted since %s", h, holder.Token(), ttl, start)
	}

	const waiters = 3
	leases := make(chan *dlm.Lease, waiters)
	var order []string
	for i := range waiters {
		go func() {
			l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl))
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
		storetest.Await(t, 10*time.Second, "waiter queued", func() bool {
			r, _ = storetest.Listed(t, s, name)
			return len(r.Waiters) == i+1
		})
		w := r.Waiters[i]
		if !storetest.OwnerID.MatchString(w.Owner) || w.Mode != driver.EX || w.Conversion || w.Owner == h.Owner ||
			slices.Contains(order, w.Owner) || w.Since.IsZero() || (i > 0 && w.Since.Before(r.Waiters[i-1].Since)) {
			t.Fatalf("new waiter = %+v, earlier ones %+v", w, r.Waiters[:i])
		}
		if got := storetest.WaiterOwners(r); !slices.Equal(got[:i], order) {
			t.Fatalf("waiters = %q, want %q first", got, order)
		}
		order = append(order, w.Owner)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-leases
	r, _ = storetest.Listed(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Owner != order[0] || r.Holders[0].Token != next.Token() {
		t.Fatalf("after the release: %+v, want holder %s with token %d", r, order[0], next.Token())
	}
	if got := storetest.WaiterOwners(r); !slices.Equal(got, order[1:]) {
		t.Fatalf("waiters after the handoff = %q, want %q", got, order[1:])
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters - 1 {
		if err := (<-leases).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := storetest.Listed(t, s, name); ok {
		t.Fatalf("released resource still listed: %+v", r)
	}
}

func TestListConversionAndSemaphore(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	doc := storetest.Resource(t)
	r1, err := c.Acquire(ctx, doc, dlm.WithMode(dlm.PR), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	r2, err := c.Acquire(ctx, doc, dlm.WithMode(dlm.PR), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release(ctx)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	converted := make(chan error, 1)
	go func() { converted <- r1.Convert(cctx, dlm.EX) }() // waits for r2
	var r driver.ResourceInfo
	storetest.Await(t, 10*time.Second, "conversion queued", func() bool {
		r, _ = storetest.Listed(t, s, doc)
		return len(r.Waiters) == 1
	})
	if len(r.Holders) != 2 || r.Holders[0].Mode != driver.PR || r.Holders[1].Mode != driver.PR ||
		r.Holders[0].Token != r1.Token() || r.Holders[1].Token != r2.Token() {
		t.Fatalf("holders = %+v, want the two readers", r.Holders)
	}
	if w := r.Waiters[0]; !w.Conversion || w.Mode != driver.EX || w.Owner != r.Holders[0].Owner {
		t.Fatalf("waiter = %+v, want the first reader converting to EX", w)
	}
	cancel()
	if err := <-converted; err == nil {
		t.Fatal("converted beside another reader")
	}

	slots := storetest.Resource(t)
	for _, n := range []int{2, 1} {
		l, err := c.Acquire(ctx, slots, dlm.WithSemaphore(3, n), dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	waited := make(chan *dlm.Lease, 1)
	go func() {
		l, _ := c.Acquire(wctx, slots, dlm.WithSemaphore(3, 2)) // ends with wcancel
		waited <- l
	}()
	storetest.Await(t, 10*time.Second, "semaphore request queued", func() bool {
		r, _ = storetest.Listed(t, s, slots)
		return len(r.Waiters) == 1
	})
	if r.Capacity != 3 || len(r.Holders) != 2 || r.Holders[0].Permits != 2 || r.Holders[1].Permits != 1 ||
		r.Waiters[0].Permits != 2 || r.Waiters[0].Conversion {
		t.Fatalf("semaphore = %+v, want capacity 3, holders of 2 and 1 permits, a waiter for 2", r)
	}
	wcancel()
	if l := <-waited; l != nil {
		t.Fatal("granted 2 of 3 permits beside 3 held")
	}
}

func TestListPrefixAndLimit(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	all := []string{"a", "a/b", "a/c", "a*", "b"}
	for _, name := range all {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"", 100, []string{"a", "a*", "a/b", "a/c", "b"}},
		{"", 2, []string{"a", "a*"}},
		{"a/", 100, []string{"a/b", "a/c"}},
		{"a/", 1, []string{"a/b"}},
		{"c", 100, nil},
	} {
		if got := storetest.Names(storetest.List(t, s, tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
}

func TestListErrors(t *testing.T) {
	_, s := newClient(t)
	if _, err := s.List(t.Context(), "", 0); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.List(ctx, "", 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, want context.Canceled", err)
	}
	s.Close()
	if _, err := s.List(t.Context(), "", 10); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("closed store: %v, want ErrUnavailable", err)
	}
}

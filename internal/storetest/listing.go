package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
)

// ListTTL is the TTL of the locks ListQueue takes.
const ListTTL = 10 * time.Second

// ListedQueue says how a store takes and lists the queue of ListQueue.
// Only Holder and Lister are required.
type ListedQueue struct {
	// Holder takes the lock first; Waiters (Holder if nil) queue behind
	// it, each with its own request.
	Holder, Waiters *dlm.Client
	// Lister lists the store.
	Lister driver.Lister
	// Resource is the resource to lock ("": a fresh one).
	Resource string
	// Shown maps a resource to the name the store lists it under (nil:
	// the resource's own name).
	Shown func(resource string) string
	// ID identifies a holder or waiter by its listed session and owner
	// (nil: the owner alone).
	ID func(session, owner string) string
	// OwnerIDs is true if the store lists package dlm's owner ids (32
	// hex digits, OwnerID) as owners.
	OwnerIDs bool
	// Tokens is true if the store lists the grants' fencing tokens.
	Tokens bool
	// MaxTTL, if not 0, bounds the holder's listed TTL, which must then be
	// in (0, MaxTTL].
	MaxTTL time.Duration
	// Metadata, if not "", is given to the holder's Acquire, and the
	// listing must show it.
	Metadata string
	// WaiterMetadata is true if waiter i gives the metadata "waiter i",
	// which the listing must show, for it and for it as the next holder.
	WaiterMetadata bool
	// Since is true if the store lists when each request was queued: the
	// scenario then waits for a waiter's time to show, and checks that
	// the waiters' times never go back.
	Since bool
	// CheckHolder and CheckWaiter (if not nil) check what only the store
	// lists: the holder when first listed with its lease, and waiter i
	// when it joins the queue.
	CheckHolder func(t *testing.T, h driver.HolderInfo, l *dlm.Lease)
	CheckWaiter func(t *testing.T, i int, w driver.WaiterInfo)
}

// ListQueueWaiters is the number of waiters ListQueue queues.
const ListQueueWaiters = 3

// ListQueue takes the lock on a resource with q.Holder (a try-lock with
// a TTL of ListTTL) and checks the listing: the resource alone, with one
// exclusive holder, no capacity and no waiter. It then queues
// ListQueueWaiters waiters with q.Waiters, one at a time: each shows up in
// exclusive mode, not as a conversion, at the end of the queue, as
// neither the holder nor an earlier waiter, the earlier ones still in
// their order. The holder's release hands the lock to the first waiter,
// which is then listed as the one holder (with its token and metadata,
// where the store lists them), the others still queued in order; once
// all are released the resource is no longer listed.
func ListQueue(t *testing.T, q ListedQueue) {
	t.Helper()
	ctx := Context(t)
	name := q.Resource
	if name == "" {
		name = Resource(t)
	}
	shown := name
	if q.Shown != nil {
		shown = q.Shown(name)
	}
	id := q.ID
	if id == nil {
		id = func(_, owner string) string { return owner }
	}
	waiters := q.Waiters
	if waiters == nil {
		waiters = q.Holder
	}

	opts := []dlm.Option{dlm.WithTTL(ListTTL), dlm.WithWait(0)}
	if q.Metadata != "" {
		opts = append(opts, dlm.WithMetadata(q.Metadata))
	}
	holder, err := q.Holder.Acquire(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := Listed(t, q.Lister, shown)
	if !ok || len(r.Holders) != 1 || len(r.Waiters) != 0 || r.Capacity != 0 {
		t.Fatalf("listing of %s = %+v (listed %v), want one holder and no waiter", shown, r, ok)
	}
	h := r.Holders[0]
	if h.Mode != driver.EX || (q.OwnerIDs && !OwnerID.MatchString(h.Owner)) ||
		(q.Tokens && h.Token != holder.Token()) || (q.Metadata != "" && h.Metadata != q.Metadata) ||
		(q.MaxTTL > 0 && (h.TTL <= 0 || h.TTL > q.MaxTTL)) {
		t.Fatalf("holder = %+v, want EX, token %d, metadata %q, TTL in (0, %s] (owner ids %v, tokens %v, TTL %v)",
			h, holder.Token(), q.Metadata, q.MaxTTL, q.OwnerIDs, q.Tokens, q.MaxTTL > 0)
	}
	if q.CheckHolder != nil {
		q.CheckHolder(t, h, holder)
	}
	holderID := id(h.Session, h.Owner)

	leases := make(chan *dlm.Lease, ListQueueWaiters)
	var order []string
	for i := range ListQueueWaiters {
		opts := []dlm.Option{dlm.WithTTL(ListTTL), dlm.WithWait(time.Minute)}
		if q.WaiterMetadata {
			opts = append(opts, dlm.WithMetadata(fmt.Sprint("waiter ", i)))
		}
		go func() {
			l, err := waiters.Acquire(ctx, name, opts...)
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
		Await(t, 10*time.Second, "waiter queued", func() bool {
			r, _ = Listed(t, q.Lister, shown)
			return len(r.Waiters) == i+1 && (!q.Since || !r.Waiters[i].Since.IsZero())
		})
		w := r.Waiters[i]
		wid := id(w.Session, w.Owner)
		if w.Mode != driver.EX || w.Conversion || (q.OwnerIDs && !OwnerID.MatchString(w.Owner)) ||
			wid == holderID || slices.Contains(order, wid) ||
			(q.WaiterMetadata && w.Metadata != fmt.Sprint("waiter ", i)) ||
			(q.Since && i > 0 && w.Since.Before(r.Waiters[i-1].Since)) {
			t.Fatalf("new waiter = %+v, earlier ones %q, holder %q", w, order, holderID)
		}
		if got := waiterIDs(r, id); !slices.Equal(got[:i], order) {
			t.Fatalf("waiters = %q, want %q first", got, order)
		}
		if q.CheckWaiter != nil {
			q.CheckWaiter(t, i, w)
		}
		order = append(order, wid)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-leases
	if next == nil {
		t.FailNow()
	}
	r, ok = Listed(t, q.Lister, shown)
	if !ok || len(r.Holders) != 1 || id(r.Holders[0].Session, r.Holders[0].Owner) != order[0] ||
		(q.Tokens && r.Holders[0].Token != next.Token()) ||
		(q.WaiterMetadata && r.Holders[0].Metadata != "waiter 0") {
		t.Fatalf("after the release: %+v, want holder %s with token %d", r, order[0], next.Token())
	}
	if got := waiterIDs(r, id); !slices.Equal(got, order[1:]) {
		t.Fatalf("waiters after the handoff = %q, want %q", got, order[1:])
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range ListQueueWaiters - 1 {
		l := <-leases
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := Listed(t, q.Lister, shown); ok {
		t.Fatalf("released resource still listed: %+v", r)
	}
}

// waiterIDs returns the ids of a resource's waiters, in order.
func waiterIDs(r driver.ResourceInfo, id func(session, owner string) string) []string {
	out := make([]string, len(r.Waiters))
	for i, w := range r.Waiters {
		out[i] = id(w.Session, w.Owner)
	}
	return out
}

// ListQuery is one List call of ListPrefixAndLimit.
type ListQuery struct {
	Prefix string
	Limit  int
}

// ListPrefixAndLimit takes a lock on each of names through c (try-locks,
// released when the test ends) and checks that each of queries lists
// exactly the names that start with its prefix, sorted, at most its
// limit of them. Pass names that only this test uses, such as a store
// of the test's own or under a key prefix of its own.
func ListPrefixAndLimit(t *testing.T, c *dlm.Client, l driver.Lister, names []string, queries []ListQuery) {
	t.Helper()
	ctx := Context(t)
	for _, name := range names {
		lease, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		t.Cleanup(func() { lease.Release(context.Background()) })
	}
	sorted := slices.Sorted(slices.Values(names))
	for _, q := range queries {
		var want []string
		for _, name := range sorted {
			if strings.HasPrefix(name, q.Prefix) && len(want) < q.Limit {
				want = append(want, name)
			}
		}
		if got := Names(List(t, l, q.Prefix, q.Limit)); !slices.Equal(got, want) {
			t.Errorf("List(%q, %d) = %q, want %q", q.Prefix, q.Limit, got, want)
		}
	}
}

// ListErrors checks how List fails: a limit of 0 or -1 with ErrInvalid;
// a cancelled context with context.Canceled only, not ErrUnavailable; and,
// if down is not nil, the lister it returns (a store whose server is gone
// or never was, or a closed store) with ErrUnavailable, within 10 s.
func ListErrors(t *testing.T, l driver.Lister, down func() driver.Lister) {
	t.Helper()
	for _, limit := range []int{0, -1} {
		if _, err := l.List(context.Background(), "", limit); !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.List(ctx, "", 10); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("cancelled context: %v, want context.Canceled only", err)
	}
	if down == nil {
		return
	}
	dead := down()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dead.List(ctx, "", 10); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("store down: %v, want ErrUnavailable", err)
	}
}

// ListConversionAndSemaphore checks the listing of a conversion and of a
// semaphore, for stores that have both (id as in ListedQueue.ID; nil: the
// owner). Two readers (PR) hold a resource and the first converts to EX,
// waiting for the second: the listing shows both readers, in grant order
// with their tokens, and the first as a waiter converting to EX. When the
// conversion's context ends it fails. Then holders of 2 and 1 of 3
// permits and a request for 2 more: the listing shows the capacity, the
// holders' permits and no mode, and a waiter for 2 permits that is not a
// conversion; when the request's context ends it is not granted.
func ListConversionAndSemaphore(t *testing.T, c *dlm.Client, l driver.Lister, id func(session, owner string) string) {
	t.Helper()
	if id == nil {
		id = func(_, owner string) string { return owner }
	}
	ctx := Context(t)
	doc := Resource(t)
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
	Await(t, 10*time.Second, "conversion queued", func() bool {
		r, _ = Listed(t, l, doc)
		return len(r.Waiters) == 1
	})
	if len(r.Holders) != 2 || r.Holders[0].Mode != driver.PR || r.Holders[1].Mode != driver.PR ||
		r.Holders[0].Token != r1.Token() || r.Holders[1].Token != r2.Token() {
		t.Fatalf("holders = %+v, want the two readers", r.Holders)
	}
	if w := r.Waiters[0]; !w.Conversion || w.Mode != driver.EX || id(w.Session, w.Owner) != id(r.Holders[0].Session, r.Holders[0].Owner) {
		t.Fatalf("waiter = %+v, want the first reader converting to EX", w)
	}
	cancel()
	if err := <-converted; err == nil {
		t.Fatal("converted beside another reader")
	}

	slots := Resource(t)
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
	Await(t, 10*time.Second, "semaphore request queued", func() bool {
		r, _ = Listed(t, l, slots)
		return len(r.Waiters) == 1
	})
	if r.Capacity != 3 || len(r.Holders) != 2 || r.Holders[0].Permits != 2 || r.Holders[1].Permits != 1 ||
		r.Holders[0].Mode != 0 || r.Waiters[0].Permits != 2 || r.Waiters[0].Conversion {
		t.Fatalf("semaphore = %+v, want capacity 3, holders of 2 and 1 permits, a waiter for 2", r)
	}
	wcancel()
	if l := <-waited; l != nil {
		t.Fatal("granted 2 of 3 permits beside 3 held")
	}
}

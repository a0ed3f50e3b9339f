package remote_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/remote"
)

// id identifies a holder or waiter across sessions.
func id(session, owner string) string { return session + "/" + owner }

func TestListHolderAndWaitersInOrder(t *testing.T) {
	hc, hs := newClient(t)
	wc, ws := newClient(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	start := time.Now()

	holder, err := hc.Acquire(ctx, name, dlm.WithMetadata("host-c pid 3"), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := storetest.Listed(t, ws, name)
	if !ok || len(r.Holders) != 1 || len(r.Waiters) != 0 || r.Capacity != 0 {
		t.Fatalf("listing = %+v (listed %v), want one holder and no waiter", r, ok)
	}
	h := r.Holders[0]
	if h.Session != strconv.FormatUint(hs.Session(), 10) || h.Owner == "" || h.Mode != driver.EX ||
		h.Token != holder.Token() || h.Metadata != "host-c pid 3" ||
		h.TTL <= 0 || h.TTL > remote.DefaultSessionTTL+time.Second || // the session's time left; +1s: the leader's margin
		h.Since.Before(start.Add(-time.Second)) || h.Since.After(time.Now().Add(time.Second)) {
		t.Fatalf("holder = %+v, want session %d, EX, token %d, metadata %q, the session's TTL left, granted since %s",
			h, hs.Session(), holder.Token(), "host-c pid 3", start)
	}

	const waiters = 3
	leases := make(chan *dlm.Lease, waiters)
	var order []string
	for i := range waiters {
		go func() {
			l, err := wc.Acquire(ctx, name, dlm.WithMetadata(fmt.Sprint("waiter ", i)))
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
		storetest.Await(t, 10*time.Second, "waiter queued", func() bool {
			r, _ = storetest.Listed(t, ws, name)
			return len(r.Waiters) == i+1
		})
		w := r.Waiters[i]
		if w.Session != strconv.FormatUint(ws.Session(), 10) || w.Mode != driver.EX || w.Conversion ||
			w.Metadata != fmt.Sprint("waiter ", i) || w.Since.IsZero() || slices.Contains(order, id(w.Session, w.Owner)) {
			t.Fatalf("new waiter = %+v, earlier ones %q", w, order)
		}
		for j, w := range r.Waiters[:i] {
			if id(w.Session, w.Owner) != order[j] {
				t.Fatalf("waiters = %+v, want %q first", r.Waiters, order)
			}
		}
		order = append(order, id(w.Session, w.Owner))
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-leases
	r, _ = storetest.Listed(t, ws, name)
	if len(r.Holders) != 1 || id(r.Holders[0].Session, r.Holders[0].Owner) != order[0] ||
		r.Holders[0].Token != next.Token() || r.Holders[0].Metadata != "waiter 0" || len(r.Waiters) != waiters-1 {
		t.Fatalf("after the release: %+v, want holder %s with token %d", r, order[0], next.Token())
	}
	for j, w := range r.Waiters {
		if id(w.Session, w.Owner) != order[j+1] {
			t.Fatalf("waiters after the handoff = %+v, want %q", r.Waiters, order[1:])
		}
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters - 1 {
		if err := (<-leases).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := storetest.Listed(t, ws, name); ok {
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
	if w := r.Waiters[0]; !w.Conversion || w.Mode != driver.EX || id(w.Session, w.Owner) != id(r.Holders[0].Session, r.Holders[0].Owner) {
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
		r.Holders[0].Mode != 0 || r.Waiters[0].Permits != 2 || r.Waiters[0].Conversion {
		t.Fatalf("semaphore = %+v, want capacity 3, holders of 2 and 1 permits, a waiter for 2", r)
	}
	wcancel()
	if l := <-waited; l != nil {
		t.Fatal("granted 2 of 3 permits beside 3 held")
	}
}

func TestListPrefixAndPages(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	dir := t.Name() + "/"
	// More resources than one page of the server.
	const n = 1100
	var (
		mu   sync.Mutex
		want []string
		wg   sync.WaitGroup
	)
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("%s%04d", dir, i)
				// Not renewed: a TTL that outlasts taking them all and
				// listing them, however loaded the machine.
				l, err := c.Acquire(ctx, name, dlm.WithWait(0), dlm.WithTTL(5*time.Minute))
				if err != nil {
					t.Error(err)
					continue
				}
				t.Cleanup(func() { l.Release(context.Background()) })
				mu.Lock()
				want = append(want, name)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(want)
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{dir, 5000, want},
		{dir, 1050, want[:1050]},
		{dir, 3, want[:3]},
		{dir + "10", 1000, want[1000:]},
		{dir + "x", 10, nil},
	} {
		if got := storetest.Names(storetest.List(t, s, tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %d names, want %d", tc.prefix, tc.limit, len(got), len(tc.want))
		}
	}
}

func TestStatus(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	l, err := c.Acquire(ctx, storetest.Resource(t), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, st.GetNowUnixNano())
	if st.GetNodeId() == "" || !st.GetLeader() || st.GetLastToken() < l.Token() || st.GetAppliedIndex() == 0 ||
		st.GetSessions() < 1 || st.GetResources() < 1 || st.GetLocks() < 1 || time.Since(now).Abs() > time.Minute {
		t.Fatalf("status = %v, want a leader that issued token %d and holds a lock", st, l.Token())
	}
}

func TestListAndStatusErrors(t *testing.T) {
	s := dial(t, shared.Addr())
	if _, err := s.List(context.Background(), "", 0); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.List(ctx, "", 10); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("List on a cancelled context: %v, want context.Canceled only", err)
	}
	if _, err := s.Status(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Status on a cancelled context: %v, want context.Canceled only", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, "", 10); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("List on a closed store: %v, want ErrUnavailable", err)
	}
	if _, err := s.Status(ctx); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Status on a closed store: %v, want ErrUnavailable", err)
	}
}

// TestListJoinsAResourceCutAcrossPages: a resource with more holders than
// a page of the server holds (500 locks) comes in pieces, which List
// joins: one ResourceInfo with every holder once, in grant order, and its
// waiter; the resources around it are listed once.
func TestListJoinsAResourceCutAcrossPages(t *testing.T) {
	c, s := newClient(t)
	ctx := storetest.Context(t)
	dir := t.Name() + "/"
	big := dir + "big"
	const n = 1150
	var (
		mu     sync.Mutex
		tokens = map[uint64]bool{}
		wg     sync.WaitGroup
	)
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for range work {
				l, err := c.Acquire(ctx, big, dlm.WithMode(dlm.PR), dlm.WithWait(0), dlm.WithTTL(5*time.Minute))
				if err != nil {
					t.Error(err)
					continue
				}
				t.Cleanup(func() { l.Release(context.Background()) })
				mu.Lock()
				tokens[l.Token()] = true
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, name := range []string{dir + "a", dir + "c"} {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0), dlm.WithTTL(5*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go c.Acquire(wctx, big, dlm.WithMetadata("the writer")) // waits until wcancel
	var r driver.ResourceInfo
	storetest.Await(t, 20*time.Second, "writer queued", func() bool {
		r, _ = storetest.Listed(t, s, big)
		return len(r.Waiters) == 1
	})

	for _, limit := range []int{3, 2} {
		res := storetest.List(t, s, dir, limit)
		if got, want := storetest.Names(res), []string{dir + "a", big, dir + "c"}[:limit]; !slices.Equal(got, want) {
			t.Fatalf("List(%q, %d) = %q, want %q", dir, limit, got, want)
		}
		r := res[1]
		seen := map[uint64]bool{}
		for _, h := range r.Holders {
			if !tokens[h.Token] || seen[h.Token] {
				t.Fatalf("holder %+v: not one of the readers, or listed twice", h)
			}
			seen[h.Token] = true
		}
		if len(r.Holders) != n || len(r.Waiters) != 1 || r.Waiters[0].Metadata != "the writer" {
			t.Fatalf("%s: %d holders and waiters %+v, want %d and the writer", big, len(r.Holders), r.Waiters, n)
		}
		if !slices.IsSortedFunc(r.Holders, func(a, b driver.HolderInfo) int { return cmp.Compare(a.Token, b.Token) }) {
			t.Fatalf("%s: holders not in grant order", big)
		}
	}
}

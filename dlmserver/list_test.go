package dlmserver_test

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
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// id identifies a holder or waiter across sessions.
func id(session, owner string) string { return session + "/" + owner }

func TestListHolderAndWaitersInOrder(t *testing.T) {
	hc, hs := newClient(t)
	wc, ws := newClient(t)
	start := time.Now()
	storetest.ListQueue(t, storetest.ListedQueue{
		Holder: hc, Waiters: wc, Lister: ws, ID: id,
		Tokens: true, Since: true, Metadata: "host-c pid 3", WaiterMetadata: true,
		// The session's time left; +1s: the leader's margin.
		MaxTTL: dlmserver.DefaultSessionTTL + time.Second,
		CheckHolder: func(t *testing.T, h driver.HolderInfo, _ *dlm.Lease) {
			if h.Session != strconv.FormatUint(hs.Session(), 10) || h.Owner == "" ||
				h.Since.Before(start.Add(-time.Second)) || h.Since.After(time.Now().Add(time.Second)) {
				t.Fatalf("holder = %+v, want session %d, granted since %s", h, hs.Session(), start)
			}
		},
		CheckWaiter: func(t *testing.T, _ int, w driver.WaiterInfo) {
			if w.Session != strconv.FormatUint(ws.Session(), 10) {
				t.Fatalf("waiter = %+v, want session %d", w, ws.Session())
			}
		},
	})
}

func TestListConversionAndSemaphore(t *testing.T) {
	c, s := newClient(t)
	storetest.ListConversionAndSemaphore(t, c, s, id)
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
	now := st.GetNow().AsTime()
	if st.GetNodeId() == "" || !st.GetLeader() || st.GetLastToken() < l.Token() || st.GetAppliedIndex() == 0 ||
		st.GetSessions() < 1 || st.GetResources() < 1 || st.GetLocks() < 1 || time.Since(now).Abs() > time.Minute {
		t.Fatalf("status = %v, want a leader that issued token %d and holds a lock", st, l.Token())
	}
}

func TestListErrors(t *testing.T) {
	s := dial(t, shared.Addr())
	storetest.ListErrors(t, s, func() driver.Lister {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestStatusErrors(t *testing.T) {
	s := dial(t, shared.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Status(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Status on a cancelled context: %v, want context.Canceled only", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
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

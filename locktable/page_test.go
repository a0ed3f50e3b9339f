package locktable

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// pageTable returns a table with resources "a" (2 locks), "big" (holders,
// a conversion and waiters: 2+1+5 entries), "c" (1 lock) and "sem" (a
// semaphore with a waiter), owned by sessions 1 to 4.
func pageTable(t *testing.T) *harness {
	h := newTest(t, 4, Limits{})
	h.grantedLock(1, "a", driver.NL)
	h.grantedLock(2, "a", driver.NL)
	b := h.grantedLock(1, "big", driver.PR)
	h.grantedLock(2, "big", driver.PR)
	wantStatus(t, h.cv(1, b, driver.EX), StatusQueued)
	for i := range 5 {
		wantStatus(t, h.lock(LockRequest{Session: SessionID(3 + i%2), Owner: OwnerID(i), Resource: "big", Mode: driver.EX}), StatusQueued)
	}
	h.grantedLock(3, "c", driver.EX)
	wantStatus(t, h.acquire(SemaphoreRequest{Session: 4, Resource: "sem", Capacity: 1, Permits: 1}), StatusGranted)
	wantStatus(t, h.acquire(SemaphoreRequest{Session: 3, Resource: "sem", Capacity: 1, Permits: 1}), StatusQueued)
	return h
}

// readAllPages pages through the resources with pages of at most
// maxRes resources and maxLocks entries, checks each page's bounds, and
// returns the resources with the pieces of each joined.
func readAllPages(t *testing.T, tb *Table, prefix string, maxRes, maxLocks int) []ResourceInfo {
	t.Helper()
	var out []ResourceInfo
	q := ResourceQuery{Prefix: prefix, MaxResources: maxRes, MaxLocks: maxLocks}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		page, more := tb.ResourcePage(q)
		entries := 0
		for _, r := range page {
			entries += len(r.Holders) + len(r.Converting) + len(r.Waiting)
		}
		if len(page) > maxRes || entries > maxLocks || (more && entries == 0) {
			t.Fatalf("page of %d resources and %d entries (bounds %d and %d), more %v", len(page), entries, maxRes, maxLocks, more)
		}
		for i, r := range page {
			if r.Continues != (i == len(page)-1 && r.First+len(r.Holders)+len(r.Converting)+len(r.Waiting) < r.HoldersTotal+r.ConvertingTotal+r.WaitingTotal) {
				t.Fatalf("resource %q: Continues %v at %d of %d, first %d", r.Name, r.Continues, i, len(page), r.First)
			}
			if n := len(out); n > 0 && out[n-1].Continues {
				last := &out[n-1]
				if r.Name != last.Name || r.First != last.First+len(last.Holders)+len(last.Converting)+len(last.Waiting) {
					t.Fatalf("piece %q from %d does not continue %q", r.Name, r.First, last.Name)
				}
				last.Holders = append(last.Holders, r.Holders...)
				last.Converting = append(last.Converting, r.Converting...)
				last.Waiting = append(last.Waiting, r.Waiting...)
				last.Continues = r.Continues
				continue
			}
			if r.First != 0 {
				t.Fatalf("resource %q starts at %d", r.Name, r.First)
			}
			out = append(out, r)
		}
		if !more {
			return out
		}
		last := page[len(page)-1]
		q.After, q.Skip = last.Name, 0
		if last.Continues {
			q.Skip = last.First + len(last.Holders) + len(last.Converting) + len(last.Waiting)
		}
	}
}

// TestResourcePage: pages bounded by resources and by entries, a resource
// cut anywhere, give back every entry exactly once, in order.
func TestResourcePage(t *testing.T) {
	h := pageTable(t)
	all := h.t.Resources("", 0)
	if len(all) != 4 || all[1].Name != "big" || all[1].HoldersTotal != 2 || all[1].ConvertingTotal != 1 || all[1].WaitingTotal != 5 {
		t.Fatalf("resources %+v", all)
	}
	for maxRes := 1; maxRes <= 5; maxRes++ {
		for maxLocks := 1; maxLocks <= 14; maxLocks++ {
			t.Run(fmt.Sprintf("%d,%d", maxRes, maxLocks), func(t *testing.T) {
				if got := readAllPages(t, h.t, "", maxRes, maxLocks); !reflect.DeepEqual(got, all) {
					t.Fatalf("pages joined:\n got  %+v\n want %+v", got, all)
				}
			})
		}
	}
	if got := readAllPages(t, h.t, "b", 9, 3); len(got) != 1 || !reflect.DeepEqual(got[0], all[1]) {
		t.Fatalf("prefix b: %+v", got)
	}

	// Going on from a piece of a resource that is gone, or shorter now,
	// passes over it.
	page, more := h.t.ResourcePage(ResourceQuery{After: "big", Skip: 8, MaxLocks: 1})
	if len(page) != 1 || page[0].Name != "c" || !more {
		t.Fatalf("after the end of big: %+v %v", page, more)
	}
	page, _ = h.t.ResourcePage(ResourceQuery{After: "b", Skip: 3})
	if len(page) != 3 || page[0].Name != "big" || page[0].First != 0 {
		t.Fatalf("after a piece of a resource that is gone: %+v", page)
	}
	page, _ = h.t.ResourcePage(ResourceQuery{After: "big", Skip: 7, MaxLocks: 2})
	if len(page) != 2 || page[0].Name != "big" || page[0].First != 7 || len(page[0].Waiting) != 1 || page[0].Continues || page[1].Name != "c" {
		t.Fatalf("the last entry of big, then c: %+v", page)
	}
	if page, more := h.t.ResourcePage(ResourceQuery{After: "sem"}); len(page) != 0 || more {
		t.Fatalf("after the last: %+v %v", page, more)
	}

	// Exact: the one resource of that name, in pieces; none for a prefix
	// of a name.
	if got := readExactPages(t, h.t, "big", 3); len(got) != 1 || !reflect.DeepEqual(got[0], all[1]) {
		t.Fatalf("exact big: %+v", got)
	}
	for _, name := range []string{"b", "bi", "bigger", ""} {
		if page, more := h.t.ResourcePage(ResourceQuery{Prefix: name, Exact: true}); len(page) != 0 || more {
			t.Fatalf("exact %q: %+v %v", name, page, more)
		}
	}
	if page, _ := h.t.ResourcePage(ResourceQuery{Prefix: "big", Exact: true, Keep: func(string) bool { return false }}); len(page) != 0 {
		t.Fatalf("exact big, kept out: %+v", page)
	}
}

// readExactPages reads resource name with Exact in pages of maxLocks.
func readExactPages(t *testing.T, tb *Table, name string, maxLocks int) []ResourceInfo {
	t.Helper()
	var out []ResourceInfo
	q := ResourceQuery{Prefix: name, Exact: true, MaxResources: 1, MaxLocks: maxLocks}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		page, more := tb.ResourcePage(q)
		for _, r := range page {
			if n := len(out); n > 0 && out[n-1].Continues {
				last := &out[n-1]
				last.Holders = append(last.Holders, r.Holders...)
				last.Converting = append(last.Converting, r.Converting...)
				last.Waiting = append(last.Waiting, r.Waiting...)
				last.Continues = r.Continues
				continue
			}
			out = append(out, r)
		}
		if !more {
			return out
		}
		last := page[len(page)-1]
		q.After, q.Skip = last.Name, last.First+len(last.Holders)+len(last.Converting)+len(last.Waiting)
	}
}

// TestSessionPage: sessions paged by count and by locks, with and without
// a filter on resource names, give back every lock exactly once.
func TestSessionPage(t *testing.T) {
	h := pageTable(t)
	h.open(5) // no lock
	all := h.t.Sessions(0, 0)
	keepB := func(name string) bool { return name[0] == 'b' }
	var onlyB []SessionInfo
	for _, s := range all {
		if s.LocksTotal != len(s.Locks) {
			t.Fatalf("session %d: total %d, %d locks", s.ID, s.LocksTotal, len(s.Locks))
		}
		k := s
		k.Locks = nil
		for _, l := range s.Locks {
			if keepB(l.Resource) {
				k.Locks = append(k.Locks, l)
			}
		}
		if k.LocksTotal = len(k.Locks); k.LocksTotal > 0 {
			onlyB = append(onlyB, k)
		}
	}
	if len(all) != 5 || len(onlyB) != 4 {
		t.Fatalf("sessions %+v, with locks on b %+v", all, onlyB)
	}
	for _, keep := range []func(string) bool{nil, keepB} {
		want := all
		if keep != nil {
			want = onlyB
		}
		for maxS := 1; maxS <= 6; maxS++ {
			for maxLocks := 1; maxLocks <= 14; maxLocks++ {
				var got []SessionInfo
				q := SessionQuery{Keep: keep, MaxSessions: maxS, MaxLocks: maxLocks}
				for pages := 0; ; pages++ {
					page, more := h.t.SessionPage(q)
					locks := 0
					for _, s := range page {
						locks += len(s.Locks)
					}
					if pages > 100 || len(page) > maxS || locks > maxLocks || (more && len(page) == 0) {
						t.Fatalf("%d,%d: page %d: %d sessions, %d locks, more %v", maxS, maxLocks, pages, len(page), locks, more)
					}
					for _, s := range page {
						if n := len(got); n > 0 && got[n-1].Continues {
							if s.ID != got[n-1].ID || s.First != len(got[n-1].Locks) {
								t.Fatalf("%d,%d: session %d from %d does not continue %d", maxS, maxLocks, s.ID, s.First, got[n-1].ID)
							}
							got[n-1].Locks = append(got[n-1].Locks, s.Locks...)
							got[n-1].Continues = s.Continues
							continue
						}
						got = append(got, s)
					}
					if !more {
						break
					}
					last := page[len(page)-1]
					q.After, q.Skip = last.ID, 0
					if last.Continues {
						q.Skip = last.First + len(last.Locks)
					}
				}
				for i := range got {
					if len(got[i].Locks) == 0 {
						got[i].Locks = nil
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%d,%d: pages joined:\n got  %+v\n want %+v", maxS, maxLocks, got, want)
				}
			}
		}
	}
}

// TestResourcePageSelectsFromMany: with many more resources than a page
// holds (so only the first names are kept while scanning), pages still give
// every resource once, in name order.
func TestResourcePageSelectsFromMany(t *testing.T) {
	tb := New(Limits{})
	if err := tb.OpenSession(Stamp{}, 1, "s"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 500 {
		name := fmt.Sprintf("r/%06d", rng.IntN(1_000_000))
		if _, err := tb.Lock(Stamp{}, LockRequest{Session: 1, Resource: name, Mode: driver.NL}); err != nil {
			t.Fatal(err)
		}
	}
	all := tb.Resources("", 0)
	for _, maxRes := range []int{7, 100} {
		if got := readAllPages(t, tb, "", maxRes, 1000); !reflect.DeepEqual(got, all) {
			t.Fatalf("pages of %d: %d resources joined, want %d", maxRes, len(got), len(all))
		}
	}
}

package locktable

import (
	"container/heap"
	"slices"
	"strings"
)

// ResourceQuery selects one page of resources for ResourcePage.
type ResourceQuery struct {
	// Prefix keeps only the names that begin with it.
	Prefix string
	// Exact keeps only the resource named Prefix exactly, which is looked
	// up instead of the names being scanned.
	Exact bool
	// Keep, if not nil, keeps only the names it accepts.
	Keep func(name string) bool
	// After is where the page starts: after the resource of this name (""
	// for the first page) or, when Skip > 0, inside it, past its first
	// Skip entries (see ResourceInfo.First). A resource that is gone, or
	// has no more than Skip entries now, is passed over.
	After string
	// Skip is the number of entries of resource After already listed.
	Skip int
	// MaxResources bounds the resources (or pieces of resources) of the
	// page; no bound if it is not positive.
	MaxResources int
	// MaxLocks bounds the entries of Holders, Converting and Waiting of the
	// page taken together; no bound if it is not positive. A resource with
	// more entries than are left is cut (ResourceInfo.Continues).
	MaxLocks int
}

// ResourcePage lists the resources q selects in name order, with their
// holders and queues, within the bounds of q, and reports whether more
// follow. The page goes on from a resource cut by the previous one (if
// q.After and q.Skip say so) and cuts its last resource if its entries do
// not fit; a page has at least one entry if any resource is left. A
// listing of many pages is not a snapshot: a resource that changes between
// two pages can show an entry twice or miss one. Like Resources, it sorts
// the names it selects, so it is meant for listings, not hot paths.
func (t *Table) ResourcePage(q ResourceQuery) (page []ResourceInfo, more bool) {
	cont := q.Skip > 0
	// Every resource has an entry, so a page bounded to MaxResources needs
	// no more than the first MaxResources+2 names (one more for a cut
	// resource with nothing left, one to tell whether more follow).
	sel := newSmallest(q.MaxResources + 2)
	if q.MaxResources <= 0 {
		sel = newSmallest(0)
	}
	selected := func(name string) bool {
		return (name > q.After || cont && name == q.After) && strings.HasPrefix(name, q.Prefix) && (q.Keep == nil || q.Keep(name))
	}
	if q.Exact {
		if t.resources[q.Prefix] != nil && selected(q.Prefix) {
			sel.add(q.Prefix)
		}
	} else {
		for name := range t.resources {
			if selected(name) {
				sel.add(name)
			}
		}
	}
	names := sel.sorted()
	budget := q.MaxLocks
	for _, name := range names {
		r := t.resources[name]
		first := 0
		if cont && name == q.After {
			first = q.Skip
		}
		n := r.entries() - first
		if n <= 0 {
			continue
		}
		if (q.MaxResources > 0 && len(page) == q.MaxResources) || (q.MaxLocks > 0 && budget == 0) {
			return page, true
		}
		if q.MaxLocks > 0 {
			n = min(n, budget)
			budget -= n
		}
		ri := r.piece(first, n)
		page = append(page, ri)
		if ri.Continues {
			return page, true
		}
	}
	return page, false
}

// entries is the number of entries of the resource's three lists: granted
// locks, queued conversions and queued new requests. A converting lock is
// in two of them.
func (r *resource) entries() int {
	if r.q == nil {
		return r.granted.n
	}
	return r.granted.n + r.q.conv.n + r.q.wait.n
}

// piece describes resource r with n of its entries, from position first
// of its granted list, conversion queue and wait queue taken as one list.
func (r *resource) piece(first, n int) ResourceInfo {
	ri := ResourceInfo{
		Name:         r.name,
		Kind:         r.kind,
		Capacity:     r.capacity,
		Used:         r.used,
		HoldersTotal: r.granted.n,
		First:        first,
		Continues:    first+n < r.entries(),
	}
	lists := []pieceList{{&r.granted, linkGranted, &ri.Holders}}
	if r.q != nil {
		ri.ConvertingTotal, ri.WaitingTotal = r.q.conv.n, r.q.wait.n
		lists = append(lists, pieceList{&r.q.conv, linkQueue, &ri.Converting}, pieceList{&r.q.wait, linkQueue, &ri.Waiting})
	}
	skip := first
	for _, x := range lists {
		if n == 0 {
			break
		}
		if skip >= x.ls.n {
			skip -= x.ls.n
			continue
		}
		out := make([]LockInfo, 0, min(x.ls.n-skip, n))
		for l := x.ls.head; l != nil && n > 0; l = l.link[x.k].next {
			if skip > 0 {
				skip--
				continue
			}
			out = append(out, l.info())
			n--
		}
		*x.out = out
	}
	return ri
}

// pieceList is one list of a resource and where piece describes it.
type pieceList struct {
	ls  *lockList
	k   int // its link
	out *[]LockInfo
}

// SessionQuery selects one page of sessions for SessionPage.
type SessionQuery struct {
	// Keep, if not nil, keeps only the locks on the resources it accepts,
	// and only the sessions with such a lock.
	Keep func(resource string) bool
	// After is where the page starts: after session After (0 for the first
	// page) or, when Skip > 0, inside it, past its first Skip (kept) locks.
	// A session that is gone, or has no more than Skip locks now, is
	// passed over.
	After SessionID
	// Skip is the number of locks of session After already listed.
	Skip int
	// MaxSessions bounds the sessions (or pieces of sessions) of the page;
	// no bound if it is not positive.
	MaxSessions int
	// MaxLocks bounds the locks of the page; no bound if it is not
	// positive. A session with more locks than are left is cut
	// (SessionInfo.Continues).
	MaxLocks int
}

// SessionPage lists the sessions q selects in id order, each with its
// locks in id order, within the bounds of q, and reports whether more
// follow: the session counterpart of ResourcePage.
func (t *Table) SessionPage(q SessionQuery) (page []SessionInfo, more bool) {
	cont := q.Skip > 0
	after := q.After
	if cont && after > 0 {
		after-- // session After itself is listed, from q.Skip on
	}
	budget := q.MaxLocks
	for _, id := range t.sortedSessionIDs(after) {
		s := t.sessions[id]
		total := s.locks.n
		if q.Keep != nil {
			total = 0
			for l := s.locks.head; l != nil; l = l.link[linkSession].next {
				if q.Keep(l.res.name) {
					total++
				}
			}
			if total == 0 {
				continue
			}
		}
		first := 0
		if cont && id == q.After {
			first = q.Skip
		}
		n := total - first
		if first > 0 && n <= 0 {
			continue
		}
		if (q.MaxSessions > 0 && len(page) == q.MaxSessions) || (q.MaxLocks > 0 && budget == 0) {
			return page, true
		}
		if q.MaxLocks > 0 {
			n = min(n, budget)
			budget -= n
		}
		si := SessionInfo{ID: s.id, Label: s.label, OpenedAt: s.openedAt, LocksTotal: total, First: first, Continues: first+n < total}
		if n > 0 {
			si.Locks = make([]LockInfo, 0, n)
		}
		skip := first
		for l := s.locks.head; l != nil && n > 0; l = l.link[linkSession].next {
			if q.Keep != nil && !q.Keep(l.res.name) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			si.Locks = append(si.Locks, l.info())
			n--
		}
		page = append(page, si)
		if si.Continues {
			return page, true
		}
	}
	return page, false
}

// smallest keeps the k smallest of the names added (all of them if k is
// not positive), in a max-heap: a name above the largest kept one costs one
// comparison, so selecting from n names is O(n log k) at worst.
type smallest struct {
	k     int
	names []string // a max-heap once k are kept
}

func newSmallest(k int) *smallest { return &smallest{k: k} }

// add offers name.
func (s *smallest) add(name string) {
	switch {
	case s.k <= 0 || len(s.names) < s.k:
		s.names = append(s.names, name)
		if len(s.names) == s.k {
			heap.Init(maxHeap(s.names))
		}
	case name < s.names[0]:
		s.names[0] = name
		heap.Fix(maxHeap(s.names), 0)
	}
}

// sorted returns the names kept, in increasing order.
func (s *smallest) sorted() []string {
	slices.Sort(s.names)
	return s.names
}

// maxHeap is a heap of names with the largest on top; it never grows or
// shrinks (Push and Pop are not used).
type maxHeap []string

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (maxHeap) Push(any)             { panic("locktable: maxHeap does not grow") }
func (maxHeap) Pop() any             { panic("locktable: maxHeap does not shrink") }

package memory

import (
	"slices"
	"strconv"
	"strings"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// maxTrace bounds the work of naming the resources of a deadlock, in locks
// examined; past it the error names the requested resource and the group
// only.
const maxTrace = 10_000

// hop is one request of a traced wait-for path, and the index of the hop
// that waits on it (-1 for the refused request).
type hop struct {
	req  locktable.LockInfo
	prev int
}

// trace names the resources of a cycle through which start, a request of
// group g that the table refused as a deadlock, would wait on g: a
// breadth-first search from start over the table as it stands, following
// each request to the holders it conflicts with (to every holder, for a
// semaphore) and to the requests queued ahead of it, and each holder's
// owner to its pending requests. It returns "; cycle through" and the
// resources in wait order, or "" if it finds none within maxTrace (the
// table also refuses an in-place conversion that would make others wait on
// an owner waiting on them: that cycle does not start at the request).
func (s *Store) trace(g *group, start locktable.LockInfo) string {
	hops := []hop{{req: start, prev: -1}}
	seenReq := map[locktable.LockID]bool{}
	seenOwner := map[locktable.SessionID]bool{}
	budget := maxTrace
	for i := 0; i < len(hops) && budget > 0; i++ {
		q := hops[i].req
		r, ok := s.tab.Resource(q.Resource)
		if !ok {
			continue
		}
		budget -= len(r.Holders) + len(r.Converting) + len(r.Waiting)
		for _, h := range r.Holders {
			if h.ID == q.ID || r.Kind == locktable.KindLock && driver.Compatible(h.Mode, q.Requested) {
				continue
			}
			if h.Session == g.session {
				return "; cycle through " + path(hops, i)
			}
			if seenOwner[h.Session] {
				continue
			}
			seenOwner[h.Session] = true
			budget -= s.pendingOf(h, func(p locktable.LockInfo) {
				if !seenReq[p.ID] {
					seenReq[p.ID] = true
					hops = append(hops, hop{req: p, prev: i})
				}
			})
		}
		ahead := r.Converting
		if q.State == locktable.LockWaiting {
			ahead = append(slices.Clip(ahead), r.Waiting...)
		}
		for _, p := range ahead {
			if p.ID == q.ID {
				break
			}
			if !seenReq[p.ID] {
				seenReq[p.ID] = true
				hops = append(hops, hop{req: p, prev: i})
			}
		}
	}
	return ""
}

// pendingOf calls f with each pending request of the owner of holder h,
// and returns the number of locks it examined.
func (s *Store) pendingOf(h locktable.LockInfo, f func(locktable.LockInfo)) int {
	e := s.byLock[h.ID]
	if e == nil || e.group == nil {
		if h.State == locktable.LockConverting {
			f(h) // an ungrouped owner has this one lock
		}
		return 1
	}
	n := 0
	for m := e.group.head; m != nil; m = m.next {
		n++
		if info, ok := s.tab.Describe(m.lock); ok && info.State != locktable.LockGranted {
			f(info)
		}
	}
	return n
}

// path returns the resources of hops from the first to hops[i], in wait
// order, quoted and without repeats in a row.
func path(hops []hop, i int) string {
	var names []string
	for ; i >= 0; i = hops[i].prev {
		names = append(names, hops[i].req.Resource)
	}
	slices.Reverse(names)
	names = slices.Compact(names)
	for j, n := range names {
		names[j] = strconv.Quote(n)
	}
	return strings.Join(names, ", ")
}

package locktable

import "github.com/dlmhq/dlm/driver"

// Deadlock detection.
//
// The wait-for graph has two kinds of nodes: owners (session, owner id) and
// pending requests. Its edges are:
//
//   - owner → each of its pending requests: an owner is assumed to be
//     blocked while it has a pending request, so it releases nothing;
//   - request → the owner of every granted lock (other than its own) whose
//     mode conflicts with the requested mode; for a semaphore request, the
//     owner of every holder without whose permits it could never fit;
//   - request → the request just ahead of it in its queue (strict FIFO:
//     it cannot be granted before that one), and the head of the wait
//     queue → the tail of the conversion queue (conversions go first).
//
// A request or conversion is refused with ErrDeadlock when queueing it
// would close a cycle, and so is an in-place conversion whose new mode
// would make queued requests wait on an owner that waits on them. The
// search is an iterative depth-first search over slices and intrusive
// lists in a fixed order, with epoch marks instead of visited maps, so it
// is deterministic and allocation-free; it gives up (finding nothing) after
// Limits.MaxDeadlockSearch steps.
//
// With at most one pending request per owner (one owner per thread of
// control), these checks keep the graph acyclic: grants only ever add edges
// into owners that have nothing pending. An owner with several pending
// requests at once can still end up in a cycle closed by a later grant;
// deadlines resolve those.

// ownerKey identifies an owner: a node of the wait-for graph.
type ownerKey struct {
	session SessionID
	owner   OwnerID
}

// ownerQueue lists an owner's pending requests, in lock id order.
type ownerQueue struct {
	pending lockList
	visit   uint64
}

// addPending records pending request l under its owner.
func (t *Table) addPending(l *lock) {
	k := l.key()
	oq := t.pending[k]
	if oq == nil {
		if n := len(t.freeOwners); n > 0 {
			oq = t.freeOwners[n-1]
			t.freeOwners = t.freeOwners[:n-1]
		} else {
			oq = new(ownerQueue)
		}
		t.pending[k] = oq
	}
	oq.pending.insertByID(l, linkOwner)
}

// removePending forgets pending request l.
func (t *Table) removePending(l *lock) {
	k := l.key()
	oq := t.pending[k]
	oq.pending.remove(l, linkOwner)
	if oq.pending.n == 0 {
		delete(t.pending, k)
		*oq = ownerQueue{}
		if len(t.freeOwners) < maxFree {
			t.freeOwners = append(t.freeOwners, oq)
		}
	}
}

// search is one deadlock search. Nodes reached carry mark; goal nodes
// carry mark+1.
type search struct {
	t       *Table
	mark    uint64
	goal    ownerKey
	hasGoal bool
	budget  int
}

// newSearch starts a search with fresh marks.
func (t *Table) newSearch() search {
	t.searchMark += 2
	t.stack = t.stack[:0]
	return search{t: t, mark: t.searchMark, budget: t.lim.MaxDeadlockSearch}
}

// newRequestDeadlocks reports whether queueing a new request of owner k on
// r, for mode want (locks) or permits (semaphores), would close a cycle.
func (t *Table) newRequestDeadlocks(r *resource, k ownerKey, want driver.Mode, permits uint32) bool {
	s := t.newSearch()
	s.goal, s.hasGoal = k, true
	var pred *lock
	if r.q != nil {
		pred = r.q.wait.tail
		if pred == nil {
			pred = r.q.conv.tail
		}
	}
	return s.follow(r, nil, want, permits, pred) || s.run()
}

// conversionDeadlocks reports whether queueing the conversion of granted
// lock l to mode want would close a cycle. Besides the owner, the head of
// the wait queue is a goal: once l is queued it waits on l.
func (t *Table) conversionDeadlocks(l *lock, want driver.Mode) bool {
	s := t.newSearch()
	s.goal, s.hasGoal = l.key(), true
	r := l.res
	var pred *lock
	if r.q != nil {
		pred = r.q.conv.tail
		if h := r.q.wait.head; h != nil {
			h.visit = s.mark + 1
		}
	}
	return s.follow(r, l, want, 0, pred) || s.run()
}

// inPlaceDeadlocks reports whether granting lock l the mode m in place
// would close a cycle: the queued requests of its resource that m blocks
// would wait on l's owner, so that owner must not wait on any of them.
func (t *Table) inPlaceDeadlocks(l *lock, m driver.Mode) bool {
	r := l.res
	if r.q == nil {
		return false
	}
	oq := t.pending[l.key()]
	if oq == nil {
		return false // the owner waits on nothing
	}
	s := t.newSearch()
	goals := false
	for _, ls := range [2]*lockList{&r.q.conv, &r.q.wait} {
		for p := ls.head; p != nil; p = p.link[linkQueue].next {
			if !compatible(m, p.want) {
				p.visit = s.mark + 1
				goals = true
			}
		}
	}
	if !goals {
		return false
	}
	oq.visit = s.mark
	for p := oq.pending.head; p != nil; p = p.link[linkOwner].next {
		if s.reachRequest(p) {
			return true
		}
	}
	return s.run()
}

// run expands the stacked requests until a goal is reached, the stack is
// empty or the budget is spent.
func (s *search) run() bool {
	st := &s.t.stack
	for len(*st) > 0 && s.budget >= 0 {
		p := (*st)[len(*st)-1]
		*st = (*st)[:len(*st)-1]
		pred := p.link[linkQueue].prev
		if pred == nil && p.state == stateWaiting {
			pred = p.res.q.conv.tail
		}
		if s.follow(p.res, p, p.want, p.permits, pred) {
			return true
		}
	}
	return false
}

// follow expands the edges of a request on r: to the owners of the granted
// locks it waits on (self, its own lock, excluded), and to pred, the
// request ahead of it.
func (s *search) follow(r *resource, self *lock, want driver.Mode, permits uint32, pred *lock) bool {
	if s.scanHolders(r, self, want) {
		for g := r.granted.head; g != nil && s.budget >= 0; g = g.link[linkGranted].next {
			s.budget--
			if g == self {
				continue
			}
			var blocks bool
			if r.kind == KindLock {
				blocks = !compatible(g.mode, want)
			} else {
				blocks = g.permits > r.capacity-permits
			}
			if blocks && s.reachOwner(g.key()) {
				return true
			}
		}
	}
	return pred != nil && s.reachRequest(pred)
}

// scanHolders reports whether the holders of r must be scanned for a
// request for want. New requests for the same mode on the same resource
// wait on the same holders, so they are scanned once per search.
func (s *search) scanHolders(r *resource, self *lock, want driver.Mode) bool {
	if r.kind != KindLock {
		return true
	}
	if r.mask&^compatMask[want] == 0 {
		return false // no granted lock conflicts
	}
	if self != nil && self.state != stateWaiting {
		return true // a conversion excludes its own lock: no sharing
	}
	if r.visit != s.mark {
		r.visit, r.visitModes = s.mark, 0
	}
	if r.visitModes&modeBit(want) != 0 {
		return false
	}
	r.visitModes |= modeBit(want)
	return true
}

// reachOwner follows an edge to owner k, and from it to its pending
// requests.
func (s *search) reachOwner(k ownerKey) bool {
	if s.hasGoal && k == s.goal {
		return true
	}
	oq := s.t.pending[k]
	if oq == nil || oq.visit == s.mark {
		return false
	}
	oq.visit = s.mark
	for p := oq.pending.head; p != nil; p = p.link[linkOwner].next {
		if s.reachRequest(p) {
			return true
		}
	}
	return false
}

// reachRequest follows an edge to request p, stacking it for expansion.
func (s *search) reachRequest(p *lock) bool {
	switch p.visit {
	case s.mark + 1:
		return true
	case s.mark:
		return false
	}
	s.budget--
	p.visit = s.mark
	s.t.stack = append(s.t.stack, p)
	return false
}

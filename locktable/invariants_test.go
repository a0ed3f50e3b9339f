package locktable

import (
	"fmt"
	"slices"

	"github.com/dlmhq/dlm/driver"
)

// checkInvariants verifies the internal consistency of the table and the
// properties every operation must preserve:
//
//   - granted locks are pairwise compatible (semaphores: within capacity),
//     and the per-mode counts and masks match the granted lists;
//   - the wait queue is in arrival (id) order, the conversion queue in
//     queueing-time order;
//   - grant-pending is at a fixpoint: no queue head could be granted (unless
//     its deadline passed and it awaits Advance), so queued requests are
//     granted as soon as holders leave;
//   - sessions, owners, the deadline heap and the lock index agree;
//   - with acyclic set, the wait-for graph has no cycle.
func checkInvariants(t *Table, acyclic bool) error {
	seen := 0
	pending := 0
	for name, r := range t.resources {
		if r.name != name || r.empty() {
			return fmt.Errorf("resource %q: bad name or empty", name)
		}
		var count [modeSlots]int32
		var used uint32
		n := 0
		var prev *lock
		for l := r.granted.head; l != nil; l = l.link[linkGranted].next {
			n++
			if l.link[linkGranted].prev != prev {
				return fmt.Errorf("resource %q: broken granted links", name)
			}
			prev = l
			if l.res != r || !l.granted() || t.locks[l.id] != l {
				return fmt.Errorf("lock %d: bad granted record", l.id)
			}
			if l.token == 0 || l.token > t.lastToken || l.id >= t.nextID {
				return fmt.Errorf("lock %d: token %d / id out of range", l.id, l.token)
			}
			if r.kind == KindLock {
				count[l.mode]++
				for o := r.granted.head; o != nil; o = o.link[linkGranted].next {
					if o != l && !driver.Compatible(o.mode, l.mode) {
						return fmt.Errorf("resource %q: lock %d %v and lock %d %v granted together", name, l.id, l.mode, o.id, o.mode)
					}
				}
			} else {
				used += l.permits
			}
		}
		if n != r.granted.n || r.granted.tail != prev {
			return fmt.Errorf("resource %q: granted count %d != %d", name, n, r.granted.n)
		}
		seen += n
		if r.kind == KindLock {
			var mask uint8
			for m := driver.NL; m <= driver.EX; m++ {
				if count[m] > 0 {
					mask |= modeBit(m)
				}
			}
			if count != r.count || mask != r.mask {
				return fmt.Errorf("resource %q: counts %v/%b, want %v/%b", name, r.count, r.mask, count, mask)
			}
		} else if used != r.used || used > r.capacity {
			return fmt.Errorf("semaphore %q: used %d (recorded %d) of %d", name, used, r.used, r.capacity)
		}
		if r.q == nil {
			continue
		}
		if r.q.conv.n == 0 && r.q.wait.n == 0 {
			return fmt.Errorf("resource %q: empty queues not freed", name)
		}
		var want [modeSlots]int32
		for qi, ls := range []*lockList{&r.q.conv, &r.q.wait} {
			state := []lockState{stateConverting, stateWaiting}[qi]
			n := 0
			var prev *lock
			for l := ls.head; l != nil; l = l.link[linkQueue].next {
				n++
				if l.link[linkQueue].prev != prev {
					return fmt.Errorf("resource %q: broken queue links", name)
				}
				if l.state != state || l.res != r || t.locks[l.id] != l {
					return fmt.Errorf("lock %d: bad queued record (state %d)", l.id, l.state)
				}
				if prev != nil && state == stateWaiting && prev.id >= l.id {
					return fmt.Errorf("resource %q: wait queue out of order: %d before %d", name, prev.id, l.id)
				}
				if prev != nil && state == stateConverting && prev.queuedAt > l.queuedAt {
					return fmt.Errorf("resource %q: conversion queue out of order", name)
				}
				if (l.deadline != 0) != (l.heapIdx >= 0) || (l.heapIdx >= 0 && (int(l.heapIdx) >= len(t.deadlines) || t.deadlines[l.heapIdx] != l)) {
					return fmt.Errorf("lock %d: not in the deadline heap correctly", l.id)
				}
				if r.kind == KindLock {
					want[l.want]++
				}
				prev = l
			}
			if n != ls.n || ls.tail != prev {
				return fmt.Errorf("resource %q: queue count %d != %d", name, n, ls.n)
			}
			pending += n
			if state == stateWaiting {
				seen += n
			}
		}
		if want != r.q.want {
			return fmt.Errorf("resource %q: queued mode counts %v, want %v", name, r.q.want, want)
		}
		// Fixpoint: the head that would be granted next cannot be.
		if t.headGrantable(r) {
			return fmt.Errorf("resource %q: a queue head is grantable but queued", name)
		}
	}
	if seen != len(t.locks) || pending != t.nPending {
		return fmt.Errorf("lock index has %d locks, resources %d; pending %d, recorded %d", len(t.locks), seen, pending, t.nPending)
	}

	// Sessions list their locks in id order.
	total := 0
	for id, s := range t.sessions {
		if s.id != id {
			return fmt.Errorf("session %d: bad id", id)
		}
		var prev *lock
		for l := s.locks.head; l != nil; l = l.link[linkSession].next {
			total++
			if l.sess != s || t.locks[l.id] != l || (prev != nil && prev.id >= l.id) || l.link[linkSession].prev != prev {
				return fmt.Errorf("session %d: bad lock list at %d", id, l.id)
			}
			prev = l
		}
		if s.locks.tail != prev {
			return fmt.Errorf("session %d: bad tail", id)
		}
	}
	if total != len(t.locks) {
		return fmt.Errorf("sessions list %d locks, index %d", total, len(t.locks))
	}

	// Owners list their pending requests in id order.
	opend := 0
	for k, oq := range t.pending {
		var prev *lock
		for l := oq.pending.head; l != nil; l = l.link[linkOwner].next {
			opend++
			if l.key() != k || l.state == stateGranted || (prev != nil && prev.id >= l.id) {
				return fmt.Errorf("owner %v: bad pending list", k)
			}
			prev = l
		}
		if oq.pending.n == 0 {
			return fmt.Errorf("owner %v: empty pending list kept", k)
		}
	}
	if opend != t.nPending {
		return fmt.Errorf("owners list %d pending, want %d", opend, t.nPending)
	}

	// The deadline heap.
	for i, l := range t.deadlines {
		if int(l.heapIdx) != i || l.deadline == 0 || t.locks[l.id] != l || l.state == stateGranted {
			return fmt.Errorf("deadline heap: bad entry %d", i)
		}
		if i > 0 && t.deadlines.less(i, (i-1)/2) {
			return fmt.Errorf("deadline heap: order broken at %d", i)
		}
	}
	if acyclic {
		if cyc := findCycle(t); cyc != nil {
			return fmt.Errorf("wait-for graph has a cycle: %v", cyc)
		}
	}
	return nil
}

// findCycle builds the wait-for graph naively (see deadlock.go for the
// definition) and returns a cycle of lock ids and owners, or nil.
func findCycle(t *Table) []string {
	type node struct {
		owner ownerKey
		req   *lock
	}
	var ids []LockID
	for id := range t.locks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	edges := map[node][]node{}
	for _, id := range ids {
		l := t.locks[id]
		if l.state == stateGranted {
			continue
		}
		on := node{owner: l.key()}
		edges[on] = append(edges[on], node{req: l})
		rn := node{req: l}
		r := l.res
		for g := r.granted.head; g != nil; g = g.link[linkGranted].next {
			if g == l {
				continue
			}
			if r.kind == KindLock && !driver.Compatible(g.mode, l.want) ||
				r.kind == KindSemaphore && g.permits > r.capacity-l.permits {
				edges[rn] = append(edges[rn], node{owner: g.key()})
			}
		}
		pred := l.link[linkQueue].prev
		if pred == nil && l.state == stateWaiting {
			pred = r.q.conv.tail
		}
		if pred != nil {
			edges[rn] = append(edges[rn], node{req: pred})
		}
	}
	color := map[node]int{}
	var stack []node
	var visit func(n node) []node
	visit = func(n node) []node {
		color[n] = 1
		stack = append(stack, n)
		for _, m := range edges[n] {
			switch color[m] {
			case 1:
				i := slices.Index(stack, m)
				return slices.Clone(stack[i:])
			case 0:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = 2
		return nil
	}
	var starts []node
	for n := range edges {
		starts = append(starts, n)
	}
	for _, n := range starts {
		if color[n] == 0 {
			if c := visit(n); c != nil {
				var out []string
				for _, x := range c {
					if x.req != nil {
						out = append(out, fmt.Sprintf("req%d", x.req.id))
					} else {
						out = append(out, fmt.Sprintf("owner%d/%d", x.owner.session, x.owner.owner))
					}
				}
				return out
			}
		}
	}
	return nil
}

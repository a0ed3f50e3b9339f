package etcd

import "slices"

// slotSet is what a session's requests on one resource use of its keys
// (see Store.slotKey): slot n is the key ending in "-n". A request keeps its
// slot while it lives, so that its retries reuse its key and a lost reply
// cannot leave a second key in the queue. A slot is free again once its key
// was deleted by a call whose answer came back, if no call of the request
// failed without an answer; a slot whose key may still be written or
// deleted by such a call (a create or a delete still in flight) is retired
// for the session's life instead, so that the call can never touch a later
// request's key. The next session has keys of its own (its lease is in
// their names).
type slotSet struct {
	uses    []slotUse // the requests holding a slot, usually one
	retired []int     // slots retired for the session's life
}

// slotUse is one request's slot.
type slotUse struct {
	owner  string // the request's owner
	n      int
	unsure bool // a call of the request failed without an answer
}

// use returns the index in set.uses of owner's slot, or -1.
func (set *slotSet) use(owner string) int {
	for i := range set.uses {
		if set.uses[i].owner == owner {
			return i
		}
	}
	return -1
}

// taken reports whether slot n is in use or retired.
func (set *slotSet) taken(n int) bool {
	for _, u := range set.uses {
		if u.n == n {
			return true
		}
	}
	return slices.Contains(set.retired, n)
}

// keyOf returns the key of owner's request on resource, whose directory is
// dir, under session ss: the request's slot if it has one, else the lowest
// free slot, which it takes.
func (s *Store) keyOf(ss *session, resource, dir, owner string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := ss.slots[resource]
	if set == nil {
		set = &slotSet{}
		if ss.slots == nil {
			ss.slots = make(map[string]*slotSet)
		}
		ss.slots[resource] = set
	}
	i := set.use(owner)
	if i < 0 {
		n := 0
		for set.taken(n) {
			n++
		}
		set.uses = append(set.uses, slotUse{owner: owner, n: n})
		i = len(set.uses) - 1
	}
	return slotKey(dir, ss.id, set.uses[i].n)
}

// unsure records that a call of owner's request under ss failed without an
// answer: its slot will be retired, not freed.
func (s *Store) unsure(ss *session, resource, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := ss.slots[resource]; set != nil {
		if i := set.use(owner); i >= 0 {
			set.uses[i].unsure = true
		}
	}
}

// leaveSlot ends the hold of owner's request on its slot under ss: the slot
// is free for the next request when its key is certainly gone and no call of
// the request is in flight (free), and retired otherwise.
func (s *Store) leaveSlot(ss *session, resource, owner string, free bool) {
	if ss == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	leaveSlotLocked(ss, resource, owner, free)
}

func leaveSlotLocked(ss *session, resource, owner string, free bool) {
	set := ss.slots[resource]
	if set == nil {
		return
	}
	i := set.use(owner)
	if i < 0 {
		return
	}
	u := set.uses[i]
	set.uses = slices.Delete(set.uses, i, i+1)
	if !free || u.unsure {
		set.retired = append(set.retired, u.n) // the slot stays taken
		return
	}
	if len(set.uses) == 0 && len(set.retired) == 0 {
		delete(ss.slots, resource)
	}
}

// retireSlots retires the slot of owner's request on resource in every live
// session: the request was released by its owner alone (a grant without a
// ticket), after an attempt whose answer was lost.
func (s *Store) retireSlots(resource, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		leaveSlotLocked(ss, resource, owner, false)
	}
}

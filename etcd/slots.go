package etcd

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
	owners map[string]*slotUse // request owner -> its slot
	taken  map[int]struct{}    // slots in use or retired
}

// slotUse is one request's slot.
type slotUse struct {
	n      int
	unsure bool // a call of the request failed without an answer
}

// keyOf returns the key of req's request on its resource under session ss:
// the request's slot if it has one, else the lowest free slot, which it
// takes.
func (s *Store) keyOf(ss *session, resource, owner string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := ss.slots[resource]
	if set == nil {
		set = &slotSet{owners: make(map[string]*slotUse), taken: make(map[int]struct{})}
		if ss.slots == nil {
			ss.slots = make(map[string]*slotSet)
		}
		ss.slots[resource] = set
	}
	u := set.owners[owner]
	if u == nil {
		u = &slotUse{}
		for _, ok := set.taken[u.n]; ok; _, ok = set.taken[u.n] {
			u.n++
		}
		set.owners[owner] = u
		set.taken[u.n] = struct{}{}
	}
	return s.slotKey(resource, ss.id, u.n)
}

// unsure records that a call of owner's request under ss failed without an
// answer: its slot will be retired, not freed.
func (s *Store) unsure(ss *session, resource, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if set := ss.slots[resource]; set != nil && set.owners[owner] != nil {
		set.owners[owner].unsure = true
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
	u := set.owners[owner]
	if u == nil {
		return
	}
	delete(set.owners, owner)
	if !free || u.unsure {
		return // retired: the slot stays taken
	}
	delete(set.taken, u.n)
	if len(set.taken) == 0 {
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

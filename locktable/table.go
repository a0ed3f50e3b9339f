package locktable

import "fmt"

// Table is the lock table: sessions, resources, locks and their queues. It
// is a deterministic state machine: its state depends only on the sequence
// of operations and their arguments. It reads no clock, starts no
// goroutine, does no I/O and uses no randomness. A Table is not safe for
// concurrent use; the caller serializes operations (the Raft FSM does).
type Table struct {
	lim Limits

	now       int64  // table clock: max of every Stamp.Now
	lastToken uint64 // last fencing token issued
	nextID    LockID // next lock id to issue
	index     uint64 // Stamp.Index of the current operation

	sessions  map[SessionID]*session
	resources map[string]*resource
	locks     map[LockID]*lock
	pending   map[ownerKey]*ownerQueue // owners with queued requests
	deadlines deadlineHeap
	nPending  int // queued requests and conversions

	// Per-operation scratch, reused to avoid allocations.
	events     []Event
	touched    []*resource // resources to settle, in first-touch order
	fresh      []*lock     // locks granted or converted in this operation
	ids        []SessionID
	stack      []*lock
	touchMark  uint64 // epoch of resource.touch
	searchMark uint64 // epoch of the deadlock search marks

	// Free lists of records, so steady-state operations do not allocate.
	freeLocks  []*lock
	freeRes    []*resource
	freeQs     []*queues
	freeOwners []*ownerQueue
}

// maxFree bounds each free list.
const maxFree = 1024

// New returns an empty table with the given limits (zero fields take the
// defaults).
func New(lim Limits) *Table {
	t := &Table{lim: lim.withDefaults()}
	t.reset()
	return t
}

// reset empties the table.
func (t *Table) reset() {
	t.now, t.lastToken, t.nextID, t.nPending = 0, 0, 1, 0
	t.sessions = make(map[SessionID]*session)
	t.resources = make(map[string]*resource)
	t.locks = make(map[LockID]*lock)
	t.pending = make(map[ownerKey]*ownerQueue)
	t.deadlines = nil
}

// Limits returns the limits in force, defaults filled in.
func (t *Table) Limits() Limits { return t.lim }

// Now returns the table clock: the largest Stamp.Now seen.
func (t *Table) Now() int64 { return t.now }

// LastToken returns the last fencing token issued (0 if none).
func (t *Table) LastToken() uint64 { return t.lastToken }

// begin starts a mutating operation: it advances the clock and resets the
// per-operation scratch.
func (t *Table) begin(st Stamp) {
	t.now = max(t.now, st.Now)
	t.index = st.Index
	if cap(t.events) > 1<<16 {
		t.events = nil // do not keep a huge buffer after a mass expiry
	}
	t.events = t.events[:0]
	t.startTouch()
}

// result builds the Result of the current operation.
func (t *Table) result(id LockID, st Status, token uint64) Result {
	r := Result{Lock: id, Status: st, Token: token}
	if len(t.events) > 0 {
		r.Events = t.events
	}
	return r
}

// issueToken returns a fencing token strictly greater than every token
// issued before, and at least the operation's Stamp.Index.
func (t *Table) issueToken() uint64 {
	t.lastToken = max(t.lastToken+1, t.index)
	return t.lastToken
}

// checkName validates a resource name.
func (t *Table) checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty resource name", ErrInvalidArgument)
	}
	if len(name) > t.lim.MaxNameLen {
		return fmt.Errorf("%w: resource name is %d bytes, the limit is %d", ErrNameTooLong, len(name), t.lim.MaxNameLen)
	}
	return nil
}

// session returns the open session id.
func (t *Table) session(id SessionID) (*session, error) {
	s := t.sessions[id]
	if s == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownSession, id)
	}
	return s, nil
}

// ownedLock returns lock id after checking that it belongs to session sid.
func (t *Table) ownedLock(sid SessionID, id LockID) (*lock, error) {
	if _, err := t.session(sid); err != nil {
		return nil, err
	}
	l := t.locks[id]
	if l == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownLock, id)
	}
	if l.sess.id != sid {
		return nil, fmt.Errorf("%w: lock %d is not held by session %d", ErrNotOwner, id, sid)
	}
	return l, nil
}

// newResource creates and registers a resource.
func (t *Table) newResource(name string, kind Kind, capacity uint32) *resource {
	var r *resource
	if n := len(t.freeRes); n > 0 {
		r = t.freeRes[n-1]
		t.freeRes = t.freeRes[:n-1]
	} else {
		r = new(resource)
	}
	r.name, r.kind, r.capacity = name, kind, capacity
	t.resources[name] = r
	return r
}

// newLock creates and registers a lock record in session s (not yet in any
// resource list).
func (t *Table) newLock(s *session, owner OwnerID, r *resource, permits uint32) *lock {
	var l *lock
	if n := len(t.freeLocks); n > 0 {
		l = t.freeLocks[n-1]
		t.freeLocks = t.freeLocks[:n-1]
	} else {
		l = new(lock)
	}
	l.id = t.nextID
	t.nextID++
	l.sess, l.owner, l.res, l.permits, l.heapIdx = s, owner, r, permits, -1
	t.locks[l.id] = l
	s.locks.pushBack(l, linkSession)
	return l
}

// freeLock unregisters a lock that is in no resource list any more.
func (t *Table) freeLock(l *lock) {
	l.sess.locks.remove(l, linkSession)
	delete(t.locks, l.id)
	*l = lock{}
	if len(t.freeLocks) < maxFree {
		t.freeLocks = append(t.freeLocks, l)
	}
}

// touch records that resource r changed in this operation, so that settle
// grants what became grantable and deletes it if empty.
func (t *Table) touch(r *resource) {
	if r.touch != t.touchMark {
		r.touch = t.touchMark
		t.touched = append(t.touched, r)
	}
}

// startTouch begins a new set of touched resources.
func (t *Table) startTouch() {
	t.touchMark++
	t.touched = t.touched[:0]
	t.fresh = t.fresh[:0]
}

// settle finishes an operation: it grants from the queues of every touched
// resource, in first-touch order, sends blocking notices for locks granted
// in this operation, and deletes resources left empty.
func (t *Table) settle() {
	for _, r := range t.touched {
		t.grantPending(r)
	}
	for _, l := range t.fresh {
		if l.res.q != nil {
			t.notifyHolder(l)
		}
	}
	for i, r := range t.touched {
		if r.empty() {
			t.deleteResource(r)
		}
		t.touched[i] = nil
	}
	clear(t.fresh)
	t.touched = t.touched[:0]
	t.fresh = t.fresh[:0]
}

// deleteResource removes an empty resource.
func (t *Table) deleteResource(r *resource) {
	delete(t.resources, r.name)
	*r = resource{}
	if len(t.freeRes) < maxFree {
		t.freeRes = append(t.freeRes, r)
	}
}

// Stats is a summary of the table, for metrics.
type Stats struct {
	Sessions  int    // open sessions
	Resources int    // resources with a lock or a waiter
	Locks     int    // lock records: granted locks plus queued new requests
	Pending   int    // queued new requests plus queued conversions
	LastToken uint64 // last fencing token issued
	Now       int64  // table clock
}

// Stats returns a summary of the table.
func (t *Table) Stats() Stats {
	return Stats{
		Sessions:  len(t.sessions),
		Resources: len(t.resources),
		Locks:     len(t.locks),
		Pending:   t.nPending,
		LastToken: t.lastToken,
		Now:       t.now,
	}
}

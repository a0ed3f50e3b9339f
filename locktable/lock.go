package locktable

import "github.com/dlmhq/dlm/driver"

// lockState is where a lock record stands. The values are those of the
// exported LockState.
type lockState uint8

const (
	// stateWaiting: a new request in the resource's wait queue.
	stateWaiting = lockState(LockWaiting)
	// stateGranted: held in mode, nothing pending.
	stateGranted = lockState(LockGranted)
	// stateConverting: held in mode and queued in the conversion queue for
	// want.
	stateConverting = lockState(LockConverting)
)

// The intrusive lists a lock can be linked into, one link pair each.
const (
	linkGranted = iota // the resource's granted list
	linkQueue          // the resource's conversion or wait queue
	linkSession        // the session's locks, in id order
	linkOwner          // the owner's pending requests, in id order
	numLinks
)

// links is one prev/next pair.
type links struct{ prev, next *lock }

// lock is one lock record: a granted lock, a queued request, or a granted
// lock with a queued conversion. Semaphore locks use permits instead of
// modes.
type lock struct {
	id        LockID
	sess      *session
	owner     OwnerID
	res       *resource
	token     uint64      // fencing token of the current grant; 0 until granted
	grantedAt int64       // table time the current mode was granted
	queuedAt  int64       // table time the pending request was queued
	deadline  int64       // of the pending request; 0 for none
	visit     uint64      // deadlock search mark (see search)
	permits   uint32      // semaphore permits; 0 for locks
	heapIdx   int32       // index in the deadline heap, -1 if absent
	mode      driver.Mode // granted mode (stateGranted, stateConverting)
	want      driver.Mode // requested mode (stateWaiting, stateConverting)
	state     lockState
	notified  uint8 // modes already sent in Blocking events (semaphores: bit 0)
	link      [numLinks]links
}

// granted reports whether the lock holds a mode (possibly while converting).
func (l *lock) granted() bool { return l.state != stateWaiting }

// key is the deadlock-graph node of the lock's owner.
func (l *lock) key() ownerKey { return ownerKey{l.sess.id, l.owner} }

// lockList is an intrusive doubly linked list of locks through one link.
type lockList struct {
	head, tail *lock
	n          int
}

// pushBack appends l through link k.
func (ls *lockList) pushBack(l *lock, k int) {
	l.link[k] = links{prev: ls.tail}
	if ls.tail != nil {
		ls.tail.link[k].next = l
	} else {
		ls.head = l
	}
	ls.tail = l
	ls.n++
}

// insertByID inserts l through link k, keeping the list sorted by lock id.
// Ids mostly arrive in order, so it searches from the tail.
func (ls *lockList) insertByID(l *lock, k int) {
	at := ls.tail
	for at != nil && at.id > l.id {
		at = at.link[k].prev
	}
	if at == ls.tail {
		ls.pushBack(l, k)
		return
	}
	var next *lock
	if at == nil {
		next = ls.head
		ls.head = l
	} else {
		next = at.link[k].next
		at.link[k].next = l
	}
	l.link[k] = links{prev: at, next: next}
	next.link[k].prev = l
	ls.n++
}

// remove unlinks l from link k.
func (ls *lockList) remove(l *lock, k int) {
	lk := &l.link[k]
	if lk.prev != nil {
		lk.prev.link[k].next = lk.next
	} else {
		ls.head = lk.next
	}
	if lk.next != nil {
		lk.next.link[k].prev = lk.prev
	} else {
		ls.tail = lk.prev
	}
	*lk = links{}
	ls.n--
}

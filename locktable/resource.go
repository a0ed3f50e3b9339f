package locktable

import (
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// Kind is the kind of a resource.
type Kind uint8

// The resource kinds. A resource has one kind for its whole life; requests
// of the other kind fail with ErrKindMismatch.
const (
	// KindLock is a lock resource with the six modes.
	KindLock Kind = iota + 1
	// KindSemaphore is a semaphore with a fixed number of permits.
	KindSemaphore
)

// String returns "lock" or "semaphore".
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// resource is one lockable name. It exists only while it has a granted lock
// or a queued request.
type resource struct {
	name     string
	kind     Kind
	capacity uint32 // semaphores: total permits
	used     uint32 // semaphores: permits granted
	granted  lockList
	count    [modeSlots]int32 // locks: granted locks per mode
	mask     uint8            // locks: modes with a non-zero count
	q        *queues          // nil while nothing is queued

	touch      uint64 // operation mark, see Table.touch
	visit      uint64 // deadlock search mark
	visitModes uint8  // modes whose holders the search already followed
}

// queues holds a resource's queued requests, allocated only while any.
type queues struct {
	conv lockList // conversions of granted locks, FIFO
	wait lockList // new requests, FIFO
	// want counts queued requests per requested mode (locks only).
	want [modeSlots]int32
}

// waiters is the number of queued requests and conversions.
func (r *resource) waiters() int {
	if r.q == nil {
		return 0
	}
	return r.q.conv.n + r.q.wait.n
}

// locks is the number of lock records of the resource: granted locks
// (converting ones included) plus queued new requests.
func (r *resource) locks() int {
	if r.q == nil {
		return r.granted.n
	}
	return r.granted.n + r.q.wait.n
}

// empty reports whether the resource has nothing and can be deleted.
func (r *resource) empty() bool { return r.granted.n == 0 && r.q == nil }

// addGranted appends l, already in its granted mode, to the granted list.
func (r *resource) addGranted(l *lock) {
	r.granted.pushBack(l, linkGranted)
	r.account(l.mode, l.permits, 1)
}

// removeGranted takes l out of the granted list.
func (r *resource) removeGranted(l *lock) {
	r.granted.remove(l, linkGranted)
	r.account(l.mode, l.permits, -1)
}

// setMode changes the granted mode of l, which is in the granted list.
func (r *resource) setMode(l *lock, m driver.Mode) {
	r.account(l.mode, 0, -1)
	l.mode = m
	r.account(m, 0, 1)
}

// account adds delta locks of mode m (locks) or delta*permits permits
// (semaphores) to the granted totals.
func (r *resource) account(m driver.Mode, permits uint32, delta int32) {
	if r.kind == KindSemaphore {
		if delta > 0 {
			r.used += permits
		} else {
			r.used -= permits
		}
		return
	}
	r.count[m] += delta
	if r.count[m] == 0 {
		r.mask &^= modeBit(m)
	} else {
		r.mask |= modeBit(m)
	}
}

// compatibleNew reports whether a new lock in mode m is compatible with
// every granted lock.
func (r *resource) compatibleNew(m driver.Mode) bool {
	return r.mask&^compatMask[m] == 0
}

// compatibleConv reports whether granted lock l may hold mode m: m is
// compatible with every other granted lock.
func (r *resource) compatibleConv(l *lock, m driver.Mode) bool {
	others := r.mask
	if r.count[l.mode] == 1 {
		others &^= modeBit(l.mode)
	}
	return others&^compatMask[m] == 0
}

// fits reports whether n more permits fit in the semaphore.
func (r *resource) fits(n uint32) bool { return n <= r.capacity-r.used }

// queueOf returns the queue l is (or would be) in.
func (r *resource) queueOf(l *lock) *lockList {
	if l.state == stateConverting {
		return &r.q.conv
	}
	return &r.q.wait
}

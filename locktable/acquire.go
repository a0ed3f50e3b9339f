package locktable

import (
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// Lock asks for a new lock on resource req.Resource in mode req.Mode. It is
// granted at once (StatusGranted, with its token) only if the mode is
// compatible with every granted lock and nothing is queued on the resource:
// no barging, so no starvation. Otherwise the request fails with
// ErrWouldBlock (NoQueue, or a deadline already passed), ErrDeadlock (it
// would close a cycle) or a limit error, or it is queued at the tail of the
// wait queue (StatusQueued) and the holders it waits on get blocking
// notices.
func (t *Table) Lock(st Stamp, req LockRequest) (Result, error) {
	t.begin(st)
	s, err := t.checkRequest(req.Session, req.Resource, req.Flags)
	if err != nil {
		return Result{}, err
	}
	if !req.Mode.Valid() {
		return Result{}, fmt.Errorf("%w: %d", ErrInvalidMode, uint8(req.Mode))
	}
	r := t.resources[req.Resource]
	if r == nil {
		if len(t.resources) >= t.lim.MaxResources {
			return Result{}, fmt.Errorf("%w: %d resources", ErrTooManyResources, len(t.resources))
		}
		r = t.newResource(req.Resource, KindLock, 0)
	} else if r.kind != KindLock {
		return Result{}, fmt.Errorf("%w: %q is a %v", ErrKindMismatch, r.name, r.kind)
	} else if err := t.checkRoom(r); err != nil {
		return Result{}, err
	}
	if r.q == nil && r.compatibleNew(req.Mode) {
		return t.grantNow(s, req.Owner, r, req.Mode, 0), nil
	}
	if err := t.checkWait(r, req.Flags, req.Deadline); err != nil {
		return Result{}, err
	}
	if t.newRequestDeadlocks(r, ownerKey{s.id, req.Owner}, req.Mode, 0) {
		return Result{}, fmt.Errorf("%w: %v lock on %q", ErrDeadlock, req.Mode, r.name)
	}
	return t.queueNew(s, req.Owner, r, req.Mode, 0, req.Deadline), nil
}

// AcquirePermits asks for req.Permits permits of semaphore req.Resource,
// creating it with req.Capacity permits if it does not exist. The rules are
// those of Lock: granted at once only if the permits fit and nobody is
// queued (FIFO, no barging), else refused or queued. Permits are returned
// by Release, or when the session ends.
func (t *Table) AcquirePermits(st Stamp, req SemaphoreRequest) (Result, error) {
	t.begin(st)
	s, err := t.checkRequest(req.Session, req.Resource, req.Flags)
	if err != nil {
		return Result{}, err
	}
	if req.Capacity == 0 || req.Permits == 0 || req.Permits > req.Capacity {
		return Result{}, fmt.Errorf("%w: %d permits of a semaphore of %d (want 1 to capacity)", ErrInvalidArgument, req.Permits, req.Capacity)
	}
	r := t.resources[req.Resource]
	if r == nil {
		if len(t.resources) >= t.lim.MaxResources {
			return Result{}, fmt.Errorf("%w: %d resources", ErrTooManyResources, len(t.resources))
		}
		r = t.newResource(req.Resource, KindSemaphore, req.Capacity)
	} else if r.kind != KindSemaphore {
		return Result{}, fmt.Errorf("%w: %q is a %v", ErrKindMismatch, r.name, r.kind)
	} else if r.capacity != req.Capacity {
		return Result{}, fmt.Errorf("%w: %q has %d permits, request says %d", ErrCapacityMismatch, r.name, r.capacity, req.Capacity)
	} else if err := t.checkRoom(r); err != nil {
		return Result{}, err
	}
	if r.q == nil && r.fits(req.Permits) {
		return t.grantNow(s, req.Owner, r, 0, req.Permits), nil
	}
	if err := t.checkWait(r, req.Flags, req.Deadline); err != nil {
		return Result{}, err
	}
	if t.newRequestDeadlocks(r, ownerKey{s.id, req.Owner}, 0, req.Permits) {
		return Result{}, fmt.Errorf("%w: %d permits of %q", ErrDeadlock, req.Permits, r.name)
	}
	return t.queueNew(s, req.Owner, r, 0, req.Permits, req.Deadline), nil
}

// checkRequest validates what new requests have in common and returns the
// session.
func (t *Table) checkRequest(sid SessionID, name string, flags Flags) (*session, error) {
	s, err := t.session(sid)
	if err != nil {
		return nil, err
	}
	if err := t.checkName(name); err != nil {
		return nil, err
	}
	if flags&^NoQueue != 0 {
		return nil, fmt.Errorf("%w: flags %#x (only NoQueue applies to new requests)", ErrInvalidArgument, uint8(flags))
	}
	if s.locks.n >= t.lim.MaxLocksPerSession {
		return nil, fmt.Errorf("%w: session %d has %d locks, the limit is %d", ErrTooManyLocks, s.id, s.locks.n, t.lim.MaxLocksPerSession)
	}
	if n := len(t.locks); n >= t.lim.MaxLocks {
		return nil, fmt.Errorf("%w: the table has %d locks, the limit is %d", ErrTooManyLocks, n, t.lim.MaxLocks)
	}
	return s, nil
}

// checkRoom decides whether existing resource r may take one more lock.
func (t *Table) checkRoom(r *resource) error {
	if n := r.locks(); n >= t.lim.MaxLocksPerResource {
		return fmt.Errorf("%w: %q has %d locks, the limit is %d", ErrTooManyHolders, r.name, n, t.lim.MaxLocksPerResource)
	}
	return nil
}

// checkWait decides whether a request that cannot be granted now may
// queue on r.
func (t *Table) checkWait(r *resource, flags Flags, deadline int64) error {
	if flags&NoQueue != 0 || (deadline != 0 && deadline <= t.now) {
		return ErrWouldBlock
	}
	if n := r.waiters(); n >= t.lim.MaxWaitersPerResource {
		return fmt.Errorf("%w: %q has %d waiters", ErrTooManyWaiters, r.name, n)
	}
	return nil
}

// grantNow creates a lock and grants it at once.
func (t *Table) grantNow(s *session, owner OwnerID, r *resource, m driver.Mode, permits uint32) Result {
	l := t.newLock(s, owner, r, permits)
	l.want = m
	t.grant(l)
	t.fresh = t.fresh[:0] // nothing is queued: no notice to send
	return t.result(l.id, StatusGranted, l.token)
}

// queueNew creates a request at the tail of r's wait queue.
func (t *Table) queueNew(s *session, owner OwnerID, r *resource, m driver.Mode, permits uint32, deadline int64) Result {
	l := t.newLock(s, owner, r, permits)
	l.state, l.want = stateWaiting, m
	t.enqueue(l, deadline)
	t.notifyBlockers(r, nil, m, permits)
	return t.result(l.id, StatusQueued, 0)
}

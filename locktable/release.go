package locktable

import "fmt"

// Release drops lock id of session sid whatever its state: a granted lock
// is released (EventReleased, with any queued conversion dropped) and a
// queued request is cancelled (EventCancelled). Then what became grantable
// is granted. A session can only release its own locks (ErrNotOwner).
func (t *Table) Release(st Stamp, sid SessionID, id LockID) (Result, error) {
	t.begin(st)
	l, err := t.ownedLock(sid, id)
	if err != nil {
		return Result{}, err
	}
	t.dropLock(l, ReasonRequested)
	t.settle()
	return t.result(id, StatusNone, 0), nil
}

// Cancel withdraws the pending part of lock id of session sid: a queued
// new request is deleted, a queued conversion is abandoned and the lock
// stays granted in its old mode (EventCancelled either way). A lock with
// nothing queued fails with ErrNotPending.
func (t *Table) Cancel(st Stamp, sid SessionID, id LockID) (Result, error) {
	t.begin(st)
	l, err := t.ownedLock(sid, id)
	if err != nil {
		return Result{}, err
	}
	if l.state == stateGranted {
		return Result{}, fmt.Errorf("%w: lock %d", ErrNotPending, id)
	}
	t.abortRequest(l, EventCancelled, ReasonRequested)
	t.settle()
	return t.result(id, StatusNone, 0), nil
}

package locktable

import "fmt"

// Convert changes the mode of granted lock req.Lock, owned by req.Session.
//
//   - To the same mode: nothing happens (StatusGranted, no event).
//   - A down-conversion (to a mode compatible with everything the old one
//     was, such as EX to PR or PR to NL) is granted at once and keeps its
//     fencing token; queued requests it unblocks are granted.
//   - Any other conversion (up, or between PR and CW) is granted in place
//     with a new token if the new mode is compatible with every other
//     granted lock (and, with QueueConvert, no conversion is queued).
//     Otherwise it fails with ErrWouldBlock (NoQueue or a passed deadline)
//     or ErrDeadlock, or it is queued at the tail of the conversion queue,
//     ahead of every new request, while the lock keeps its old mode.
//
// A conversion refused with ErrDeadlock leaves the lock granted in its old
// mode. Semaphore locks cannot be converted (ErrKindMismatch).
func (t *Table) Convert(st Stamp, req ConvertRequest) (Result, error) {
	t.begin(st)
	l, err := t.ownedLock(req.Session, req.Lock)
	if err != nil {
		return Result{}, err
	}
	r := l.res
	switch {
	case r.kind != KindLock:
		return Result{}, fmt.Errorf("%w: lock %d is on semaphore %q", ErrKindMismatch, l.id, r.name)
	case !req.Mode.Valid():
		return Result{}, fmt.Errorf("%w: %d", ErrInvalidMode, uint8(req.Mode))
	case req.Flags&^(NoQueue|QueueConvert) != 0:
		return Result{}, fmt.Errorf("%w: flags %#x", ErrInvalidArgument, uint8(req.Flags))
	case l.state == stateWaiting:
		return Result{}, fmt.Errorf("%w: lock %d", ErrNotGranted, l.id)
	case l.state == stateConverting:
		return Result{}, fmt.Errorf("%w: lock %d is converting to %v", ErrConversionPending, l.id, l.want)
	case req.Mode == l.mode:
		return t.result(l.id, StatusGranted, l.token), nil
	}

	if isDownConversion(l.mode, req.Mode) {
		t.convert(l, req.Mode)
		t.touch(r)
		t.settle()
		return t.result(l.id, StatusGranted, l.token), nil
	}

	inPlace := r.compatibleConv(l, req.Mode) &&
		(req.Flags&QueueConvert == 0 || r.q == nil || r.q.conv.n == 0)
	if inPlace {
		if t.inPlaceDeadlocks(l, req.Mode) {
			return Result{}, fmt.Errorf("%w: converting lock %d on %q to %v", ErrDeadlock, l.id, r.name, req.Mode)
		}
		t.convert(l, req.Mode)
		t.touch(r) // leaving PR for CW can unblock a CW waiter
		t.settle()
		return t.result(l.id, StatusGranted, l.token), nil
	}

	if err := t.checkWait(r, req.Flags, req.Deadline); err != nil {
		return Result{}, err
	}
	if t.conversionDeadlocks(l, req.Mode) {
		return Result{}, fmt.Errorf("%w: converting lock %d on %q to %v", ErrDeadlock, l.id, r.name, req.Mode)
	}
	l.state, l.want = stateConverting, req.Mode
	t.enqueue(l, req.Deadline)
	t.notifyBlockers(r, l, req.Mode, 0)
	return t.result(l.id, StatusQueued, 0), nil
}

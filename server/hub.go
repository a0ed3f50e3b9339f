package server

import (
	"errors"
	"sync"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// errSlowClient ends a stream whose client does not read its events fast
// enough; errReplaced one whose session was resumed on another stream.
var (
	errSlowClient = errors.New("the client fell too far behind reading its stream; the session survives: resume it on a new stream")
	errReplaced   = errors.New("dlm server: the session was resumed on another stream")
)

// hub routes what the FSM applies to the session streams attached to this
// node: the answer to each request goes to the requesting session, every
// event to the session of the lock it concerns. Because it runs as the
// FSM's observer, every stream sees its messages in log order, an answer
// always before the later events of the same lock.
type hub struct {
	limit    int   // messages queued per stream
	maxBytes int64 // bytes queued per stream
	budget   *queueBudget

	mu    sync.Mutex
	boxes map[locktable.SessionID]*outbox
}

func newHub(limit int, maxBytes int64, budget *queueBudget) *hub {
	return &hub{limit: limit, maxBytes: maxBytes, budget: budget, boxes: make(map[locktable.SessionID]*outbox)}
}

// attach gives session sid a new outbox, ending the one it had. Call it
// under FSM.View together with building the session's sync message, so that
// no applied event falls between the two.
func (h *hub) attach(sid locktable.SessionID) *outbox {
	ob := newOutbox(sid, h.limit, h.maxBytes, h.budget)
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.boxes[sid]; old != nil {
		old.end(false, errReplaced)
	}
	h.boxes[sid] = ob
	return ob
}

// detach removes ob if it is still its session's outbox.
func (h *hub) detach(ob *outbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.boxes[ob.sid] == ob {
		delete(h.boxes, ob.sid)
	}
}

// endAll ends every stream (on loss of leadership or shutdown).
func (h *hub) endAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sid, ob := range h.boxes {
		ob.end(false, err)
		delete(h.boxes, sid)
	}
}

// route sends each answer and event of an applied command to the stream of
// the session concerned.
func (h *hub) route(c *dlmpb.Command, r *fsm.Result) {
	sid, reply, skip := answer(c, r)
	if reply == nil && len(r.Events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if reply != nil {
		if ob := h.boxes[sid]; ob != nil {
			ob.push(reply)
		}
	}
	for i := range r.Events {
		e := &r.Events[i]
		ob := h.boxes[e.Session]
		if ob == nil || skip(e) {
			continue
		}
		switch e.Kind {
		case locktable.EventSessionExpired:
			ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Expired{Expired: &dlmpb.SessionExpired{Session: uint64(e.Session)}}})
			ob.end(true, nil)
			delete(h.boxes, e.Session)
		case locktable.EventSessionClosed:
			ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Closed{Closed: &dlmpb.SessionClosed{Session: uint64(e.Session)}}})
			ob.end(true, nil)
			delete(h.boxes, e.Session)
		default:
			ob.push(eventMessage(e))
		}
	}
}

// answer returns the requesting session of command c, the answer to send it
// (nil for commands that have none), and which of the result's events the
// answer already reports.
func answer(c *dlmpb.Command, r *fsm.Result) (locktable.SessionID, *dlmpb.SessionResponse, func(*locktable.Event) bool) {
	none := func(*locktable.Event) bool { return false }
	var sid locktable.SessionID
	var conversion bool
	var mode dlmpb.Mode
	var permits uint32
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Lock:
		sid, mode, permits = locktable.SessionID(op.Lock.GetSession()), op.Lock.GetMode(), op.Lock.GetPermits()
	case *dlmpb.Command_Convert:
		sid, mode, conversion = locktable.SessionID(op.Convert.GetSession()), op.Convert.GetMode(), true
	case *dlmpb.Command_Release:
		sid = locktable.SessionID(op.Release.GetSession())
	case *dlmpb.Command_Cancel:
		sid = locktable.SessionID(op.Cancel.GetSession())
	default:
		return 0, nil, none
	}
	id := &dlmpb.RequestID{Session: uint64(sid), Seq: c.GetSeq()}
	lock := uint64(r.Lock)
	if r.Err != nil {
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Refused{Refused: &dlmpb.Refused{
			Id: id, Reason: ReasonOf(r.Err), Message: r.Err.Error(), LockId: lock,
		}}}, none
	}
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Release:
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Released{Released: &dlmpb.Released{
			Id: id, LockId: uint64(op.Release.GetLockId()), Token: r.Token,
		}}}, ownLock(sid, locktable.LockID(op.Release.GetLockId()), locktable.EventReleased, locktable.EventCancelled)
	case *dlmpb.Command_Cancel:
		lockID := locktable.LockID(op.Cancel.GetLockId())
		c := &dlmpb.Cancelled{Id: id, LockId: uint64(lockID)}
		for i := range r.Events { // what was cancelled: a request or a conversion
			if e := &r.Events[i]; e.Kind == locktable.EventCancelled && e.Lock == lockID {
				c.Mode, c.Conversion = dlmpb.Mode(e.Mode), e.Conversion
			}
		}
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Cancelled{Cancelled: c}},
			ownLock(sid, lockID, locktable.EventCancelled)
	}
	if r.Duplicate && r.Mode != 0 { // a replay: the lock's mode now
		mode = dlmpb.Mode(r.Mode)
	}
	if r.Status == locktable.StatusQueued {
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Queued{Queued: &dlmpb.Queued{
			Id: id, LockId: lock, Conversion: conversion,
		}}}, none
	}
	return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Granted{Granted: &dlmpb.Granted{
		Id: id, LockId: lock, Token: r.Token, Mode: mode, Permits: permits, Conversion: conversion,
	}}}, ownLock(sid, r.Lock, locktable.EventGranted)
}

// ownLock matches the events of lock id of session sid of the given kinds.
func ownLock(sid locktable.SessionID, id locktable.LockID, kinds ...locktable.EventKind) func(*locktable.Event) bool {
	return func(e *locktable.Event) bool {
		if e.Session != sid || e.Lock != id {
			return false
		}
		for _, k := range kinds {
			if e.Kind == k {
				return true
			}
		}
		return false
	}
}

// eventMessage turns a lock event into the message pushed to its session.
func eventMessage(e *locktable.Event) *dlmpb.SessionResponse {
	lock, mode := uint64(e.Lock), dlmpb.Mode(e.Mode)
	switch e.Kind {
	case locktable.EventGranted:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Granted{Granted: &dlmpb.Granted{
			LockId: lock, Token: e.Token, Mode: mode, Permits: e.Permits, Conversion: e.Conversion,
		}}}
	case locktable.EventBlocking:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Blocking{Blocking: &dlmpb.Blocking{
			LockId: lock, Mode: mode, Permits: e.Permits,
		}}}
	case locktable.EventReleased:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Released{Released: &dlmpb.Released{
			LockId: lock, Token: e.Token,
		}}}
	case locktable.EventCancelled:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Cancelled{Cancelled: &dlmpb.Cancelled{
			LockId: lock, Mode: mode, Conversion: e.Conversion,
		}}}
	default: // EventTimedOut
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_TimedOut{TimedOut: &dlmpb.TimedOut{
			LockId: lock, Mode: mode, Conversion: e.Conversion,
		}}}
	}
}

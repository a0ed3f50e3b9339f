package protocol

// The one path of a client request through the service, from the session
// stream to the log and back:
//
//	SessionRequest --RequestCommand--> Command --(log, state machine)--> Result
//	Command + Result --answer--> SessionResponse to the requesting session
//
// RequestCommand validates the request (validate.go) and turns it into a
// command of the stream's session, one function per kind; answer turns an
// applied command and its result back into the answer, which the hub
// (hub.go) routes to the session's stream. Both name the request with
// RequestID.
//
// The request is copied into a command, not embedded in it: the command is
// the Raft log's format, which every node replays from old entries and
// snapshots forever (its fields also make the digest that tells a retry
// from a reused request id, fsm/digest.go), while the request is the client's, free to grow fields
// that the log must not carry. They differ where it matters: the command
// names the stream's session, not the one the client wrote; its wait is
// validated nanoseconds, not a Duration; it has no request id (only the
// sequence, on the Command); and a proto field cannot be shared between
// the two without tying the log's encoding to the client's. So each kind
// has one conversion, here, beside its inverse.

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
)

// RequestID is the id of request seq of session sid, as answers carry it:
// the stream's session, whatever the client wrote, and the client's
// sequence number.
func RequestID(sid locktable.SessionID, seq uint64) *dlmpb.RequestID {
	return &dlmpb.RequestID{Session: uint64(sid), Seq: seq}
}

// requestIDOf returns the id of a session request, nil if it has none.
func requestIDOf(m *dlmpb.SessionRequest) *dlmpb.RequestID {
	switch r := m.GetMsg().(type) {
	case *dlmpb.SessionRequest_Lock:
		return r.Lock.GetId()
	case *dlmpb.SessionRequest_Convert:
		return r.Convert.GetId()
	case *dlmpb.SessionRequest_Release:
		return r.Release.GetId()
	case *dlmpb.SessionRequest_Cancel:
		return r.Cancel.GetId()
	case *dlmpb.SessionRequest_Relabel:
		return r.Relabel.GetId()
	}
	return nil
}

// RequestCommand turns a client request into a command of session sid and
// returns the request's id (nil for a close, which has none). A request
// that is refused (invalid, or of no known kind) has no command; its id
// names the refusal.
func RequestCommand(sid locktable.SessionID, m *dlmpb.SessionRequest) (*dlmpb.Command, *dlmpb.RequestID, error) {
	id := requestIDOf(m)
	if id.GetSession() != uint64(sid) { // named for this session whatever it says
		id = RequestID(sid, id.GetSeq())
	}
	if err := validateRequest(m); err != nil {
		return nil, id, err
	}
	var cmd *dlmpb.Command
	var err error
	switch r := m.GetMsg().(type) {
	case *dlmpb.SessionRequest_Close:
		return &dlmpb.Command{Op: &dlmpb.Command_CloseSession{CloseSession: &dlmpb.CloseSessionCmd{Session: uint64(sid)}}}, nil, nil
	case *dlmpb.SessionRequest_Lock:
		cmd, err = lockCommand(sid, r.Lock)
	case *dlmpb.SessionRequest_Convert:
		cmd, err = convertCommand(sid, r.Convert)
	case *dlmpb.SessionRequest_Release:
		cmd = releaseCommand(sid, r.Release)
	case *dlmpb.SessionRequest_Cancel:
		cmd = cancelCommand(sid, r.Cancel)
	case *dlmpb.SessionRequest_Relabel:
		cmd = relabelCommand(sid, r.Relabel)
	default:
		err = errors.New("dlm server: empty or unknown request")
	}
	if err != nil {
		return nil, id, err
	}
	cmd.Seq = id.GetSeq()
	return cmd, id, nil
}

// lockCommand is the command of lock request l of session sid (answered
// by answer as Granted, Queued or Refused).
func lockCommand(sid locktable.SessionID, l *dlmpb.LockRequest) (*dlmpb.Command, error) {
	wait, err := waitNanos(l.GetWait())
	if err != nil {
		return nil, err
	}
	return &dlmpb.Command{Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
		Session:   uint64(sid),
		Owner:     l.GetOwner(),
		Resource:  l.GetResource(),
		Mode:      l.GetMode(),
		NoQueue:   l.GetNoQueue(),
		WaitNanos: wait,
		Capacity:  l.GetCapacity(),
		Permits:   l.GetPermits(),
		Metadata:  l.GetMetadata(),
	}}}, nil
}

// convertCommand is the command of conversion c of session sid (answered
// by answer as Granted, Queued or Refused, with conversion set).
func convertCommand(sid locktable.SessionID, c *dlmpb.ConvertRequest) (*dlmpb.Command, error) {
	wait, err := waitNanos(c.GetWait())
	if err != nil {
		return nil, err
	}
	return &dlmpb.Command{Op: &dlmpb.Command_Convert{Convert: &dlmpb.ConvertCmd{
		Session:      uint64(sid),
		LockId:       c.GetLockId(),
		Mode:         c.GetMode(),
		NoQueue:      c.GetNoQueue(),
		QueueConvert: c.GetQueueConvert(),
		WaitNanos:    wait,
	}}}, nil
}

// releaseCommand is the command of release r of session sid (answered by
// Answer as Released or Refused).
func releaseCommand(sid locktable.SessionID, r *dlmpb.ReleaseRequest) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{
		Session: uint64(sid), LockId: r.GetLockId(),
	}}}
}

// cancelCommand is the command of cancel c of session sid (answered by
// Answer as Cancelled or Refused).
func cancelCommand(sid locktable.SessionID, c *dlmpb.CancelRequest) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{
		Session: uint64(sid), LockId: c.GetLockId(),
	}}}
}

// relabelCommand is the command of relabel r of session sid (answered by
// Answer as Relabeled or Refused).
func relabelCommand(sid locktable.SessionID, r *dlmpb.RelabelRequest) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Relabel{Relabel: &dlmpb.RelabelCmd{
		Session: uint64(sid), LockId: r.GetLockId(), Metadata: r.GetMetadata(),
	}}}
}

// waitNanos converts a request's wait: nil waits forever.
func waitNanos(d *durationpb.Duration) (*int64, error) {
	if d == nil {
		return nil, nil
	}
	if err := d.CheckValid(); err != nil {
		return nil, fmt.Errorf("dlm server: wait: %w", err)
	}
	w := d.AsDuration()
	if w < 0 {
		return nil, fmt.Errorf("dlm server: negative wait %s", w)
	}
	n := int64(w)
	return &n, nil
}

// Answer is the inverse of RequestCommand: it returns the requesting
// session of command c, the answer to send it (nil for commands that have
// none), and which of the result's events the answer already reports.
func Answer(c *dlmpb.Command, r *fsm.Result) (locktable.SessionID, *dlmpb.SessionResponse, func(*locktable.Event) bool) {
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
	case *dlmpb.Command_Relabel:
		sid = locktable.SessionID(op.Relabel.GetSession())
	default:
		return 0, nil, none
	}
	id := RequestID(sid, c.GetSeq())
	lock := uint64(r.Lock)
	if r.Err != nil {
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Refused{Refused: &dlmpb.Refused{
			Id: id, Reason: ReasonOf(r.Err), Message: r.Err.Error(), LockId: lock,
		}}}, none
	}
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Release:
		lockID := locktable.LockID(op.Release.GetLockId())
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Released{Released: &dlmpb.Released{
			Id: id, LockId: uint64(lockID), Token: ReleasedToken(r, lockID),
		}}}, ownLock(sid, lockID, locktable.EventReleased, locktable.EventCancelled)
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
	case *dlmpb.Command_Relabel:
		return sid, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Relabeled{Relabeled: &dlmpb.Relabeled{
			Id: id, LockId: op.Relabel.GetLockId(),
		}}}, none
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

// ReleasedToken returns the token of the grant that release result r of
// lock id released: 0 if the lock was only queued.
func ReleasedToken(r *fsm.Result, id locktable.LockID) uint64 {
	if r.Token != 0 {
		return r.Token
	}
	for i := range r.Events {
		if e := &r.Events[i]; e.Kind == locktable.EventReleased && e.Lock == id {
			return e.Token
		}
	}
	return 0
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

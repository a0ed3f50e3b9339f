package dlmserver

import (
	"fmt"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// dispatchLocked handles one message from the server.
func (s *Store) dispatchLocked(conn *streamConn, m *dlmpb.SessionResponse) {
	if s.st.conn != conn {
		return // a stream being replaced
	}
	switch msg := m.GetMsg().(type) {
	case *dlmpb.SessionResponse_KeepAliveAck:
		s.ackedLocked(msg.KeepAliveAck.GetSeq())
	case *dlmpb.SessionResponse_Granted:
		s.grantedLocked(msg.Granted)
	case *dlmpb.SessionResponse_Queued:
		s.queuedLocked(msg.Queued)
	case *dlmpb.SessionResponse_Refused:
		s.refusedLocked(conn, msg.Refused)
	case *dlmpb.SessionResponse_Released:
		r := msg.Released
		c := s.takeCall(r.GetId())
		if ls := s.st.locks[r.GetLockId()]; ls != nil {
			if ls.waiter != nil {
				ls.waiter.finish(fmt.Errorf("%w: the request was released", driver.ErrTaken))
				ls.waiter = nil
			}
			if c != nil && c.kind == callRelease {
				s.st.forget(ls) // our release: not a loss
			} else {
				s.st.lose(ls)
			}
		}
		if c != nil {
			c.finish(nil)
		}
	case *dlmpb.SessionResponse_Cancelled:
		r := msg.Cancelled
		c := s.takeCall(r.GetId())
		s.endWaitLocked(r.GetLockId(), r.GetConversion(), "cancelled")
		if c != nil {
			c.finish(nil)
		}
	case *dlmpb.SessionResponse_Relabeled:
		if c := s.takeCall(msg.Relabeled.GetId()); c != nil {
			c.finish(nil)
		}
	case *dlmpb.SessionResponse_TimedOut:
		s.endWaitLocked(msg.TimedOut.GetLockId(), msg.TimedOut.GetConversion(), "timed out")
	case *dlmpb.SessionResponse_Expired:
		s.loseSessionLocked(fmt.Errorf("the server expired session %d", msg.Expired.GetSession()))
	case *dlmpb.SessionResponse_Warning:
		// Something was tried against the session and refused (a resume
		// with a wrong token: someone guessing the session id).
		s.log.Warn("dlm remote: the server warns of a refused action against the session", "session", s.st.sid,
			"reason", msg.Warning.GetReason().String(), "message", msg.Warning.GetMessage())
	case *dlmpb.SessionResponse_Blocking:
		if ls := s.st.locks[msg.Blocking.GetLockId()]; ls != nil && ls.granted && !ls.gone {
			ls.block()
		}
	case *dlmpb.SessionResponse_Closed:
		// The stream ends next.
	}
}

// takeCall removes and returns the call a message answers, if any.
func (s *Store) takeCall(id *dlmpb.RequestID) *call {
	if id == nil || id.GetSeq() == 0 || id.GetSession() != s.st.sid {
		return nil
	}
	c := s.st.calls[id.GetSeq()]
	if c != nil {
		delete(s.st.calls, id.GetSeq())
	}
	return c
}

// grantedLocked handles a grant: the answer to a request, or pushed to a
// request that was queued.
func (s *Store) grantedLocked(g *dlmpb.Granted) {
	c := s.takeCall(g.GetId())
	var ls *lockState
	if c != nil {
		ls = c.lock
		s.st.setID(ls, g.GetLockId())
	} else if ls = s.st.locks[g.GetLockId()]; ls != nil {
		c, ls.waiter = ls.waiter, nil
	}
	if ls == nil || ls.gone {
		return
	}
	ls.setMode(g.GetMode())
	ls.granted, ls.token = true, g.GetToken()
	if c == nil {
		return
	}
	if c.abandoned {
		s.undoLocked(c)
		return
	}
	c.finish(nil)
}

// queuedLocked handles the answer that a request waits.
func (s *Store) queuedLocked(q *dlmpb.Queued) {
	c := s.takeCall(q.GetId())
	if c == nil {
		return
	}
	ls := c.lock
	s.st.setID(ls, q.GetLockId())
	if c.abandoned {
		s.undoLocked(c)
		return
	}
	ls.waiter = c
}

// refusedLocked handles a refusal.
func (s *Store) refusedLocked(conn *streamConn, r *dlmpb.Refused) {
	c := s.takeCall(r.GetId())
	if c == nil {
		return
	}
	reason := r.GetReason()
	switch {
	case reason == dlmpb.Reason_REASON_NOT_LEADER, reason == dlmpb.Reason_REASON_STORAGE:
		// Not applied, or outcome unknown: send it again on a new stream,
		// where the session state settles it (a server that cannot write
		// its log steps down: another, or this one once it can, serves).
		s.st.calls[c.seq] = c
		conn.cancel()
		return
	case reason == dlmpb.Reason_REASON_STALE_REQUEST:
		// Resent after a reconnect and too old for the reply cache: the
		// session state showed it was not applied, so it goes again anew.
		s.reissueLocked(c)
		return
	case c.kind == callLock:
		s.st.forget(c.lock)
	case c.kind == callRelease && (reason == dlmpb.Reason_REASON_UNKNOWN_LOCK || reason == dlmpb.Reason_REASON_NOT_OWNER):
		s.st.forget(c.lock) // already gone
	case c.undo && c.kind == callConvert:
		// A conversion could not be taken back: the lock is not in the
		// mode its lease believes. Give it up.
		s.abandonLockLocked(c.lock)
	case c.undoOf != nil && reason == dlmpb.Reason_REASON_NOT_PENDING:
		// The abandoned conversion was granted before the cancel came.
		s.revertLocked(c.undoOf)
	}
	c.finish(refusal(r))
}

// abandonLockLocked ends a lock whose state the store can no longer vouch
// for: its lease is told it is lost, and the server is asked to release it.
func (s *Store) abandonLockLocked(ls *lockState) {
	id := ls.id
	s.st.lose(ls)
	if id == 0 {
		return
	}
	rel := s.sendLocked(callRelease, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
			Id: s.reqID(seq), LockId: id,
		}}}
	})
	rel.undo = true
}

// revertLocked converts a lock back to the mode it had before an abandoned
// conversion c was granted.
func (s *Store) revertLocked(c *call) {
	ls := c.lock
	if ls.gone || !ls.granted || ls.mode != c.mode || c.from == c.mode {
		return
	}
	back := s.sendLocked(callConvert, ls, c.from, c.mode, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
			Id: s.reqID(seq), LockId: ls.id, Mode: c.from, NoQueue: true,
		}}}
	})
	back.undo = true
}

// endWaitLocked ends the wait of lock id's queued request or conversion
// (cancelled or timed out). A new request's lock is gone; a conversion's
// lock stays held in its old mode.
func (s *Store) endWaitLocked(id uint64, conversion bool, what string) {
	ls := s.st.locks[id]
	if ls == nil {
		return
	}
	if w := ls.waiter; w != nil {
		ls.waiter = nil
		w.finish(fmt.Errorf("%w: the request was %s", driver.ErrTaken, what))
	}
	if !conversion {
		s.st.forget(ls)
	}
}

// undoLocked takes back what an abandoned request got: a granted or queued
// lock is released, a granted conversion converted back, a queued one
// cancelled.
func (s *Store) undoLocked(c *call) {
	ls := c.lock
	c.finish(fmt.Errorf("%w: abandoned", driver.ErrTaken))
	if ls.id == 0 || ls.gone {
		return
	}
	switch {
	case c.kind == callLock:
		// No lease holds it, and none may find it by its owner while
		// its release is on the way: an acquisition asked again by the
		// same owner is a new request.
		if s.st.byOwner[ls.ownerKey] == ls {
			delete(s.st.byOwner, ls.ownerKey)
		}
		rel := s.sendLocked(callRelease, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
			return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
				Id: s.reqID(seq), LockId: ls.id,
			}}}
		})
		rel.undo = true
	case ls.granted && ls.mode == c.mode:
		s.revertLocked(c)
	default:
		cancel := s.sendLocked(callCancel, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
			return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Cancel{Cancel: &dlmpb.CancelRequest{
				Id: s.reqID(seq), LockId: ls.id,
			}}}
		})
		cancel.undo, cancel.undoOf = true, c
	}
}

// reconcileLocked settles the store's locks and unanswered requests against
// the session state the server sent on (re)open.
func (s *Store) reconcileLocked(sync *dlmpb.SessionSync) {
	byID := make(map[uint64]*dlmpb.LockInfo, len(sync.GetLocks()))
	for _, li := range sync.GetLocks() {
		byID[li.GetLockId()] = li
	}
	unnamed := s.unnamedLocked(sync)
	// Requests whose answers were lost.
	for seq, c := range s.st.calls {
		ls := c.lock
		var li *dlmpb.LockInfo
		if ls.id != 0 {
			li = byID[ls.id]
		} else if c.kind == callLock {
			li = unnamed[ownerResource{ls.owner, ls.resource}]
		}
		settled := true
		switch {
		case c.kind == callLock && li != nil:
			s.st.setID(ls, li.GetLockId())
			if li.GetState() == dlmpb.LockInfo_STATE_WAITING {
				ls.waiter = c
			} else {
				s.applyInfo(ls, li)
				c.finish(nil)
			}
		case c.kind == callLock:
			settled = false // never applied: send it again
		case li == nil:
			switch c.kind {
			case callConvert:
				c.finish(fmt.Errorf("%w: the lock is gone", driver.ErrNotHeld))
			case callRelease:
				s.st.forget(ls) // released: not a loss
				c.finish(nil)
			case callRelabel:
				c.finish(fmt.Errorf("%w: the lock is gone", driver.ErrNotHeld))
			default:
				c.finish(nil) // a cancel: nothing left to do
			}
		case c.kind == callConvert && li.GetState() == dlmpb.LockInfo_STATE_GRANTED && li.GetMode() == c.mode:
			s.applyInfo(ls, li)
			c.finish(nil)
		case c.kind == callConvert && li.GetState() == dlmpb.LockInfo_STATE_CONVERTING && li.GetRequested() == c.mode:
			ls.waiter = c
		case c.kind == callCancel && li.GetState() == dlmpb.LockInfo_STATE_GRANTED:
			s.applyInfo(ls, li)
			if c.undoOf != nil { // the abandoned conversion won the race
				s.revertLocked(c.undoOf)
			}
			c.finish(nil)
		default:
			settled = false
		}
		if settled {
			delete(s.st.calls, seq)
			if c.abandoned && c.kind != callRelease && c.kind != callCancel {
				s.undoLocked(c)
			}
		}
	}
	// Locks and waits.
	for id, ls := range s.st.locks {
		li := byID[id]
		if li == nil {
			if ls.waiter != nil {
				ls.waiter.finish(fmt.Errorf("%w: the request is gone", driver.ErrTaken))
				ls.waiter = nil
			}
			s.st.lose(ls)
			continue
		}
		s.applyInfo(ls, li)
		if w := ls.waiter; w != nil && li.GetState() == dlmpb.LockInfo_STATE_GRANTED {
			ls.waiter = nil
			if w.kind == callLock || li.GetMode() == w.mode {
				w.finish(nil)
			} else {
				w.finish(fmt.Errorf("%w: the conversion is gone", driver.ErrTaken))
			}
		}
	}
	s.releaseOrphansLocked(sync)
}

// ownerResource is an owner id of the session and a resource name.
type ownerResource struct {
	owner    uint64
	resource string
}

// unnamedLocked returns the locks of the session state that answer lock
// requests whose answers were lost, by owner and resource: a request not
// answered yet (its lock id unknown) is the lock of its owner on its
// resource that the store does not know. An owner is unique to one
// acquisition, except that of a group (driver.Request.Group): when two
// such requests, or two such locks, share an owner and a resource, which
// is which cannot be told, and none of them is named. Those requests go
// again with their sequence numbers and are answered from the server's
// reply cache; the locks are released as orphans meanwhile (see
// releaseOrphansLocked), so that the leases end lost rather than two of
// them sharing one lock.
func (s *Store) unnamedLocked(sync *dlmpb.SessionSync) map[ownerResource]*dlmpb.LockInfo {
	asking := make(map[ownerResource]int)
	for _, c := range s.st.calls {
		if c.kind == callLock && c.lock.id == 0 {
			asking[ownerResource{c.lock.owner, c.lock.resource}]++
		}
	}
	if len(asking) == 0 {
		return nil
	}
	found := make(map[ownerResource]int)
	out := make(map[ownerResource]*dlmpb.LockInfo)
	for _, li := range sync.GetLocks() {
		k := ownerResource{li.GetOwner(), li.GetResource()}
		if asking[k] == 0 || s.st.locks[li.GetLockId()] != nil {
			continue
		}
		found[k]++
		out[k] = li
	}
	for k, n := range found {
		if n > 1 || asking[k] > 1 {
			delete(out, k)
		}
	}
	return out
}

// releaseOrphansLocked releases the session's locks that the store does
// not know: locks granted to requests whose answers were lost and that
// could not be told apart (see unnamedLocked), or that the store gave up
// meanwhile. No request of the store names them, and no lease holds them;
// left alone they would stay with the session for as long as it lives.
func (s *Store) releaseOrphansLocked(sync *dlmpb.SessionSync) {
	named := make(map[uint64]bool, len(s.st.calls))
	for _, c := range s.st.calls {
		if c.lock != nil && c.lock.id != 0 {
			named[c.lock.id] = true
		}
	}
	for _, li := range sync.GetLocks() {
		id := li.GetLockId()
		if id == 0 || s.st.locks[id] != nil || named[id] {
			continue
		}
		ls := &lockState{id: id, resource: li.GetResource(), lost: make(chan struct{}), gone: true}
		rel := s.sendLocked(callRelease, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
			return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
				Id: s.reqID(seq), LockId: id,
			}}}
		})
		rel.undo = true
		s.log.Debug("dlm remote: releasing a lock of the session that no lease holds", "session", s.st.sid, "lock", id, "resource", li.GetResource())
	}
}

// applyInfo copies the server's view of a granted lock.
func (s *Store) applyInfo(ls *lockState, li *dlmpb.LockInfo) {
	if li.GetState() == dlmpb.LockInfo_STATE_WAITING {
		return
	}
	ls.setMode(li.GetMode())
	ls.granted, ls.token = true, li.GetToken()
}

package server

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// apply runs one command. The caller holds f.mu.
func (f *FSM) apply(st locktable.Stamp, c *dlmpb.Command) Result {
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_OpenSession:
		if err := f.sessionQuota(op.OpenSession.GetOwner()); err != nil {
			return Result{Index: st.Index, Err: err}
		}
		return f.openSession(st, op.OpenSession)
	case *dlmpb.Command_CloseSession:
		sid := locktable.SessionID(op.CloseSession.GetSession())
		r, err := f.table.CloseSession(st, sid)
		if err == nil {
			f.endSession(sid)
		}
		return newResult(st.Index, sid, r, err)
	case *dlmpb.Command_ExpireSessions:
		ids := make([]locktable.SessionID, len(op.ExpireSessions.GetSessions()))
		for i, id := range op.ExpireSessions.GetSessions() {
			ids[i] = locktable.SessionID(id)
		}
		r := f.table.ExpireSessions(st, ids)
		for _, id := range ids {
			f.endSession(id)
		}
		return newResult(st.Index, 0, r, nil)
	case *dlmpb.Command_Lock:
		return f.lock(st, c.GetSeq(), op.Lock)
	case *dlmpb.Command_Convert:
		cv := op.Convert
		sid := locktable.SessionID(cv.GetSession())
		return f.deduped(st, sid, c.GetSeq(), func() (locktable.Result, error) {
			flags := flagsOf(cv.GetNoQueue())
			if cv.GetQueueConvert() {
				flags |= locktable.QueueConvert
			}
			return f.table.Convert(st, locktable.ConvertRequest{
				Session:  sid,
				Lock:     locktable.LockID(cv.GetLockId()),
				Mode:     modeOf(cv.GetMode()),
				Flags:    flags,
				Deadline: f.deadline(st, cv.WaitNanos),
			})
		})
	case *dlmpb.Command_Release:
		sid := locktable.SessionID(op.Release.GetSession())
		return f.deduped(st, sid, c.GetSeq(), func() (locktable.Result, error) {
			return f.table.Release(st, sid, locktable.LockID(op.Release.GetLockId()))
		})
	case *dlmpb.Command_Cancel:
		sid := locktable.SessionID(op.Cancel.GetSession())
		return f.deduped(st, sid, c.GetSeq(), func() (locktable.Result, error) {
			return f.table.Cancel(st, sid, locktable.LockID(op.Cancel.GetLockId()))
		})
	case *dlmpb.Command_Advance:
		return newResult(st.Index, 0, f.table.Advance(st), nil)
	case *dlmpb.Command_SetMember:
		return f.setMember(st.Index, op.SetMember)
	default:
		return Result{Index: st.Index, Err: fmt.Errorf("%w: no known operation", ErrInvalidCommand)}
	}
}

// openSession opens a session whose id is max(last id + 1, index): unique
// and increasing even when one entry opens several.
func (f *FSM) openSession(st locktable.Stamp, op *dlmpb.OpenSessionCmd) Result {
	if op.GetTtlNanos() <= 0 {
		return Result{Index: st.Index, Err: fmt.Errorf("%w: session ttl %d", locktable.ErrInvalidArgument, op.GetTtlNanos())}
	}
	sid := max(f.lastSession+1, locktable.SessionID(st.Index))
	if err := f.table.OpenSession(st, sid, op.GetLabel()); err != nil {
		return Result{Index: st.Index, Err: err}
	}
	f.lastSession = sid
	f.sessions[sid] = &sessionRecord{ttl: time.Duration(op.GetTtlNanos()), owner: op.GetOwner()}
	return Result{Index: st.Index, Session: sid}
}

// lock asks for a lock, or for semaphore permits when a capacity is given.
func (f *FSM) lock(st locktable.Stamp, seq uint64, op *dlmpb.LockCmd) Result {
	sid := locktable.SessionID(op.GetSession())
	return f.deduped(st, sid, seq, func() (locktable.Result, error) {
		if err := f.lockQuota(sid); err != nil {
			return locktable.Result{}, err
		}
		if (op.GetCapacity() > 0) == (op.GetMode() != dlmpb.Mode_MODE_UNSPECIFIED) {
			return locktable.Result{}, fmt.Errorf("%w: a request names a mode (lock) or a capacity (semaphore), not both", locktable.ErrInvalidArgument)
		}
		if op.GetCapacity() > 0 {
			return f.table.AcquirePermits(st, locktable.SemaphoreRequest{
				Session:  sid,
				Owner:    locktable.OwnerID(op.GetOwner()),
				Resource: op.GetResource(),
				Capacity: op.GetCapacity(),
				Permits:  op.GetPermits(),
				Flags:    flagsOf(op.GetNoQueue()),
				Deadline: f.deadline(st, op.WaitNanos),
			})
		}
		return f.table.Lock(st, locktable.LockRequest{
			Session:  sid,
			Owner:    locktable.OwnerID(op.GetOwner()),
			Resource: op.GetResource(),
			Mode:     modeOf(op.GetMode()),
			Flags:    flagsOf(op.GetNoQueue()),
			Deadline: f.deadline(st, op.WaitNanos),
		})
	})
}

// deduped runs do once per (session, seq): a repeated seq gets the cached
// answer, a seq older than every cached one gets ErrStaleRequest. Seq 0 and
// unknown sessions are not deduplicated.
func (f *FSM) deduped(st locktable.Stamp, sid locktable.SessionID, seq uint64, do func() (locktable.Result, error)) Result {
	rec := f.sessions[sid]
	if seq == 0 || rec == nil {
		r, err := do()
		return newResult(st.Index, sid, r, err)
	}
	if r, ok := rec.lookup(seq); ok {
		return r.result(st.Index, sid)
	}
	if seq <= rec.floor {
		return Result{Index: st.Index, Session: sid, Err: fmt.Errorf("%w: session %d seq %d", ErrStaleRequest, sid, seq)}
	}
	r, err := do()
	rec.remember(reply{seq: seq, lock: r.Lock, status: r.Status, token: r.Token, reason: ReasonOf(err)})
	return newResult(st.Index, sid, r, err)
}

// deadline turns a relative wait into an absolute deadline in table time:
// nil waits forever (0), anything else counts from the later of the table
// clock and the stamp, saturating.
func (f *FSM) deadline(st locktable.Stamp, wait *int64) int64 {
	if wait == nil {
		return 0
	}
	now := max(f.table.Now(), st.Now)
	w := max(*wait, 0)
	if now > math.MaxInt64-w {
		return math.MaxInt64
	}
	return max(now+w, 1) // 0 would mean "forever"
}

// modeOf converts a protocol mode; anything out of range becomes the invalid
// zero mode, which the table refuses.
func modeOf(m dlmpb.Mode) locktable.Mode {
	if m < dlmpb.Mode_MODE_NL || m > dlmpb.Mode_MODE_EX {
		return 0
	}
	return locktable.Mode(m)
}

func flagsOf(noQueue bool) locktable.Flags {
	if noQueue {
		return locktable.NoQueue
	}
	return 0
}

// sortedIDs returns the keys of m in increasing order.
func sortedIDs(m map[locktable.SessionID]*sessionRecord) []locktable.SessionID {
	ids := make([]locktable.SessionID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

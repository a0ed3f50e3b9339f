package fsm

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
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
		return f.lock(st, c, op.Lock)
	case *dlmpb.Command_Convert:
		cv := op.Convert
		sid := locktable.SessionID(cv.GetSession())
		return f.deduped(st, sid, c, func() (locktable.Result, error) {
			flags := flagsOf(cv.GetNoQueue())
			if cv.GetQueueConvert() {
				flags |= locktable.QueueConvert
			}
			id := locktable.LockID(cv.GetLockId())
			r, err := f.table.Convert(st, locktable.ConvertRequest{
				Session:  sid,
				Lock:     id,
				Mode:     modeOf(cv.GetMode()),
				Flags:    flags,
				Deadline: f.deadline(st, cv.WaitNanos),
			})
			return r, f.hideForeign(sid, id, err)
		})
	case *dlmpb.Command_Release:
		sid := locktable.SessionID(op.Release.GetSession())
		return f.deduped(st, sid, c, func() (locktable.Result, error) {
			id := locktable.LockID(op.Release.GetLockId())
			r, err := f.table.Release(st, sid, id)
			return r, f.hideForeign(sid, id, err)
		})
	case *dlmpb.Command_Cancel:
		sid := locktable.SessionID(op.Cancel.GetSession())
		return f.deduped(st, sid, c, func() (locktable.Result, error) {
			id := locktable.LockID(op.Cancel.GetLockId())
			r, err := f.table.Cancel(st, sid, id)
			return r, f.hideForeign(sid, id, err)
		})
	case *dlmpb.Command_Relabel:
		sid := locktable.SessionID(op.Relabel.GetSession())
		return f.deduped(st, sid, c, func() (locktable.Result, error) {
			return f.relabel(sid, op.Relabel)
		})
	case *dlmpb.Command_Advance:
		return newResult(st.Index, 0, f.table.Advance(st), nil)
	case *dlmpb.Command_SetMember:
		return f.setMember(st.Index, op.SetMember)
	case *dlmpb.Command_CheckpointSessions:
		now := time.Now() // this node's clock, for its own use only (SessionMeta.SilentAt)
		if op.CheckpointSessions.GetUnheard() {
			for _, rec := range f.sessions {
				rec.markUnheard(now)
			}
		}
		for _, e := range op.CheckpointSessions.GetSessions() {
			if rec := f.sessions[locktable.SessionID(e.GetSession())]; rec != nil {
				rec.recordSilence(time.Duration(e.GetSilentNanos()), now)
			}
		}
		return Result{Index: st.Index}
	case *dlmpb.Command_RaiseTokens:
		// Token is the last token after the raise: every later grant is
		// above it.
		last, err := f.table.RaiseTokens(st, op.RaiseTokens.GetFloor())
		return Result{Index: st.Index, Token: last, Err: err}
	default:
		return Result{Index: st.Index, Err: fmt.Errorf("%w: no known operation", ErrInvalidCommand)}
	}
}

// relabel sets the metadata of lock op.LockId of session sid, granted or
// queued (empty metadata removes it). A lock that is not the session's is
// refused as the table refuses a release of it.
func (f *FSM) relabel(sid locktable.SessionID, op *dlmpb.RelabelCmd) (locktable.Result, error) {
	id := locktable.LockID(op.GetLockId())
	if _, ok := f.sessions[sid]; !ok {
		return locktable.Result{}, fmt.Errorf("%w: %d", locktable.ErrUnknownSession, sid)
	}
	li, ok := f.table.Describe(id)
	switch {
	case !ok:
		return locktable.Result{}, fmt.Errorf("%w: %d", locktable.ErrUnknownLock, id)
	case li.Session != sid:
		return locktable.Result{}, f.hideForeign(sid, id, fmt.Errorf("%w: lock %d is not held by session %d", locktable.ErrNotOwner, id, sid))
	}
	if md := op.GetMetadata(); len(md) > 0 {
		f.metadata[id] = md
	} else {
		delete(f.metadata, id)
	}
	return locktable.Result{Lock: id}, nil
}

// openSession opens a session whose id is max(last id + 1, index): unique
// and increasing even when one entry opens several.
func (f *FSM) openSession(st locktable.Stamp, op *dlmpb.OpenSessionCmd) Result {
	if op.GetTtlNanos() <= 0 {
		return Result{Index: st.Index, Err: fmt.Errorf("%w: session ttl %d", locktable.ErrInvalidArgument, op.GetTtlNanos())}
	}
	if n := len(op.GetResumeHash()); n != 0 && n != sha256.Size {
		return Result{Index: st.Index, Err: fmt.Errorf("%w: resume hash of %d bytes, want %d", locktable.ErrInvalidArgument, n, sha256.Size)}
	}
	sid := max(f.lastSession+1, locktable.SessionID(st.Index))
	if err := f.table.OpenSession(st, sid, op.GetLabel()); err != nil {
		return Result{Index: st.Index, Err: err}
	}
	f.lastSession = sid
	f.sessions[sid] = &sessionRecord{ttl: time.Duration(op.GetTtlNanos()), owner: op.GetOwner(), resumeHash: op.GetResumeHash()}
	return Result{Index: st.Index, Session: sid}
}

// lock asks for a lock, or for semaphore permits when a capacity is given.
func (f *FSM) lock(st locktable.Stamp, c *dlmpb.Command, op *dlmpb.LockCmd) Result {
	sid := locktable.SessionID(op.GetSession())
	return f.deduped(st, sid, c, func() (locktable.Result, error) {
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

// deduped runs do, request c of session sid, once per (session, seq).
//
// A repeated seq with the same request (its requestDigest) is a duplicate:
// nothing is applied again, and it is answered from the reply cache; for a
// lock or conversion that succeeded, with the lock as it is now (see
// replay). A repeated seq with another request is refused with
// ErrRequestIDReused; a new seq at or below the highest the session used,
// with ErrStaleRequest. Neither changes anything. Seq 0 and unknown
// sessions are not deduplicated.
//
// A command with a key (the unary API's request id) is deduplicated by
// (session, key) instead, among the session's ReplyCacheSize most recent
// keyed requests, in the same way but without an order: a key not cached
// is new.
func (f *FSM) deduped(st locktable.Stamp, sid locktable.SessionID, c *dlmpb.Command, do func() (locktable.Result, error)) Result {
	seq, key := c.GetSeq(), c.GetKey()
	rec := f.sessions[sid]
	if (seq == 0 && key == "") || rec == nil {
		r, err := do()
		return newResult(st.Index, sid, r, err)
	}
	digest := requestDigest(c)
	var cached reply
	var ok bool
	if key != "" {
		cached, ok = rec.lookupKey(key)
	} else {
		cached, ok = rec.lookup(seq)
	}
	if ok {
		if !cached.matches(digest) {
			return Result{Index: st.Index, Session: sid, Err: fmt.Errorf("%w: session %d request %s was used for another request", ErrRequestIDReused, sid, requestName(seq, key))}
		}
		if (c.GetLock() != nil || c.GetConvert() != nil) && cached.reason == dlmpb.Reason_REASON_UNSPECIFIED {
			return f.replay(st.Index, sid, requestName(seq, key), cached, c.GetConvert() != nil)
		}
		return cached.result(st.Index, sid)
	}
	if key != "" {
		r, err := do()
		rec.rememberKey(reply{key: key, lock: r.Lock, status: r.Status, token: r.Token, reason: ReasonOf(err), digest: digest})
		return newResult(st.Index, sid, r, err)
	}
	if top := rec.highest(); seq <= top {
		return Result{Index: st.Index, Session: sid, Err: fmt.Errorf("%w: session %d seq %d is not above its highest request seq %d, and its answer is not cached", ErrStaleRequest, sid, seq, top)}
	}
	r, err := do()
	rec.remember(reply{seq: seq, lock: r.Lock, status: r.Status, token: r.Token, reason: ReasonOf(err), digest: digest})
	return newResult(st.Index, sid, r, err)
}

// replay answers a repeated lock request or conversion (conversion true)
// that succeeded (cached answer r) with the current truth: its lock granted
// with its current mode and token, or queued (a new request, or a
// conversion answered as queued that still waits); or, if the lock is
// gone, a refusal with ErrUnknownLock. It changes nothing.
func (f *FSM) replay(index uint64, sid locktable.SessionID, name string, r reply, conversion bool) Result {
	res := Result{Index: index, Session: sid, Lock: r.lock, Duplicate: true}
	li, ok := f.table.Describe(r.lock)
	if !ok || li.Session != sid {
		res.Err = fmt.Errorf("%w: %d: session %d request %s was answered before, and its lock is gone (released, cancelled or timed out)", locktable.ErrUnknownLock, r.lock, sid, name)
		return res
	}
	switch {
	case li.State == locktable.LockWaiting:
		res.Status = locktable.StatusQueued
	case conversion && li.State == locktable.LockConverting && r.status == locktable.StatusQueued:
		res.Status = locktable.StatusQueued // a conversion still waiting
	default:
		res.Status, res.Token, res.Mode = locktable.StatusGranted, li.Token, li.Mode
	}
	return res
}

// requestName names a request by its seq or key in messages.
func requestName(seq uint64, key string) string {
	if key != "" {
		return strconv.Quote(key)
	}
	return "seq " + strconv.FormatUint(seq, 10)
}

// hideForeign turns err, the table's refusal of a request of session sid
// about lock id, from ErrNotOwner into the refusal of a missing lock when
// the lock's session was opened by another identity, so that an identity
// cannot probe which lock ids exist outside its own sessions. Within one
// identity (and without authentication, where every identity is "")
// ErrNotOwner stays.
func (f *FSM) hideForeign(sid locktable.SessionID, id locktable.LockID, err error) error {
	if !errors.Is(err, locktable.ErrNotOwner) {
		return err
	}
	li, ok := f.table.Describe(id)
	mine, theirs := f.sessions[sid], f.sessions[li.Session]
	if ok && mine != nil && theirs != nil && mine.owner == theirs.owner {
		return err
	}
	return fmt.Errorf("%w: %d", locktable.ErrUnknownLock, id) // the table's words for a missing lock
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
func modeOf(m dlmpb.Mode) driver.Mode {
	if m < dlmpb.Mode_MODE_NL || m > dlmpb.Mode_MODE_EX {
		return 0
	}
	return driver.Mode(m)
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

package fsm

import (
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// Default quotas of one authenticated identity (see Quotas).
const (
	// DefaultSessionsPerIdentity is the default Quotas.SessionsPerIdentity:
	// a tenth of the table's default session limit
	// (locktable.DefaultMaxSessions), so that no identity can take them all.
	DefaultSessionsPerIdentity = 10_000
	// DefaultLocksPerIdentity is the default Quotas.LocksPerIdentity: ten
	// sessions' worth of locks (locktable.DefaultMaxLocksPerSession).
	DefaultLocksPerIdentity = 100_000
)

// ErrQuota means an identity has used up its quota of open sessions or of
// locks (Quotas): the request changed nothing (REASON_QUOTA; a session open
// is refused with gRPC ResourceExhausted). Ending sessions, or releasing
// locks, makes room.
var ErrQuota = errors.New("dlm server: quota exceeded")

// Quotas bound what one authenticated identity may hold at once, so that no
// identity can exhaust the table's shared limits (locktable.Limits) for the
// others. They are enforced by the FSM, so every replica must use the same
// values (like the Limits). They apply only with authentication: without it
// every session's identity is "" and no quota applies. Zero fields take the
// defaults; there is no "unlimited", use a large number.
type Quotas struct {
	// SessionsPerIdentity bounds the open sessions of one identity; default
	// DefaultSessionsPerIdentity.
	SessionsPerIdentity int
	// LocksPerIdentity bounds the locks, held or queued, of all the
	// sessions of one identity (a conversion is not a new lock); default
	// DefaultLocksPerIdentity.
	LocksPerIdentity int
}

// withDefaults returns q with every non-positive field set to its default.
func (q Quotas) withDefaults() Quotas {
	if q.SessionsPerIdentity <= 0 {
		q.SessionsPerIdentity = DefaultSessionsPerIdentity
	}
	if q.LocksPerIdentity <= 0 {
		q.LocksPerIdentity = DefaultLocksPerIdentity
	}
	return q
}

// usage is what one identity holds: open sessions, and locks held or queued.
type usage struct {
	sessions, locks int
}

// quotaBook counts what each identity holds, for the Quotas. It is derived
// state: never in a snapshot, recounted from the table and the session
// records on Restore (see recount), and kept up to date by every command
// (see count). Sessions without an identity ("", no authentication) are
// not counted.
type quotaBook struct {
	byOwner map[string]*usage
	// sessionLocks are the locks of each counted session that has any, to
	// take them off its identity when the session ends.
	sessionLocks map[locktable.SessionID]int
}

func newQuotaBook() quotaBook {
	return quotaBook{byOwner: make(map[string]*usage), sessionLocks: make(map[locktable.SessionID]int)}
}

// of returns owner's usage, zero if it holds nothing.
func (b *quotaBook) of(owner string) usage {
	if u := b.byOwner[owner]; u != nil {
		return *u
	}
	return usage{}
}

// add changes owner's usage (and session sid's locks) by the given
// amounts, forgetting what drops to zero.
func (b *quotaBook) add(owner string, sid locktable.SessionID, sessions, locks int) {
	u := b.byOwner[owner]
	if u == nil {
		u = &usage{}
		b.byOwner[owner] = u
	}
	u.sessions += sessions
	u.locks += locks
	if *u == (usage{}) {
		delete(b.byOwner, owner)
	}
	if locks != 0 {
		if n := b.sessionLocks[sid] + locks; n != 0 {
			b.sessionLocks[sid] = n
		} else {
			delete(b.sessionLocks, sid)
		}
	}
}

// sessionQuota refuses a session for owner when it has its quota of
// sessions open. The caller holds f.mu.
func (f *FSM) sessionQuota(owner string) error {
	if owner == "" {
		return nil
	}
	if n := f.usage.of(owner).sessions; n >= f.quotas.SessionsPerIdentity {
		return fmt.Errorf("%w: identity %q has %d sessions open, its quota is %d", ErrQuota, owner, n, f.quotas.SessionsPerIdentity)
	}
	return nil
}

// lockQuota refuses a new lock of session sid when its identity has its
// quota of locks. The caller holds f.mu.
func (f *FSM) lockQuota(sid locktable.SessionID) error {
	rec := f.sessions[sid]
	if rec == nil || rec.owner == "" {
		return nil // unknown sessions are the table's to refuse
	}
	if n := f.usage.of(rec.owner).locks; n >= f.quotas.LocksPerIdentity {
		return fmt.Errorf("%w: identity %q has %d locks held or queued, its quota is %d", ErrQuota, rec.owner, n, f.quotas.LocksPerIdentity)
	}
	return nil
}

// endSession forgets session sid's record, and takes it and its locks off
// its identity's usage. The caller holds f.mu.
func (f *FSM) endSession(sid locktable.SessionID) {
	if rec := f.sessions[sid]; rec != nil && rec.owner != "" {
		f.usage.add(rec.owner, sid, -1, -f.usage.sessionLocks[sid])
	}
	delete(f.sessions, sid)
}

// count updates the usage after command c applied with result r: a session
// opened, a lock created, locks gone (released, or a request cancelled or
// timed out). Ended sessions were taken off by endSession, their records
// gone, so the events of their locks count for nothing here. The caller
// holds f.mu.
func (f *FSM) count(c *dlmpb.Command, r *Result) {
	if r.Err == nil && !r.Duplicate {
		switch op := c.GetOp().(type) {
		case *dlmpb.Command_OpenSession:
			if owner := op.OpenSession.GetOwner(); owner != "" {
				f.usage.add(owner, r.Session, 1, 0)
			}
		case *dlmpb.Command_Lock:
			if rec := f.sessions[r.Session]; rec != nil && rec.owner != "" {
				f.usage.add(rec.owner, r.Session, 0, 1)
			}
		}
	}
	for i := range r.Events {
		e := &r.Events[i]
		gone := e.Kind == locktable.EventReleased ||
			((e.Kind == locktable.EventCancelled || e.Kind == locktable.EventTimedOut) && !e.Conversion)
		if !gone {
			continue
		}
		if rec := f.sessions[e.Session]; rec != nil && rec.owner != "" {
			f.usage.add(rec.owner, e.Session, 0, -1)
		}
	}
}

// recount counts the usage afresh from the table and the session records.
// The caller holds f.mu.
func (f *FSM) recount() quotaBook {
	b := newQuotaBook()
	for sid, rec := range f.sessions {
		if rec.owner == "" {
			continue
		}
		locks := 0
		if si, ok := f.table.Session(sid); ok {
			locks = len(si.Locks)
		}
		b.add(rec.owner, sid, 1, locks)
	}
	return b
}

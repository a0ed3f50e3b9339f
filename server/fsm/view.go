package fsm

import (
	"slices"

	"github.com/dlmhq/dlm/locktable"
)

// View is a read-only view of the state machine, valid only inside the
// callback of FSM.Read: the lock table, the sessions' records, the holders'
// descriptions and the applied index, all as of the same entry.
type View struct{ f *FSM }

// Read calls fn with a view of the state, under the FSM's read lock. fn
// must only read, must not keep the view or the table, and must not call
// the FSM.
func (f *FSM) Read(fn func(v View)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(View{f})
}

// Table returns the lock table, for its read-only methods.
func (v View) Table() *locktable.Table { return v.f.table }

// Applied returns the index of the last entry applied.
func (v View) Applied() uint64 { return v.f.applied }

// Metadata returns the holder description of lock id (nil if it has none).
func (v View) Metadata(id locktable.LockID) []byte { return v.f.metadata[id] }

// Session returns what the state machine records about session id beside
// the lock table: its TTL and the identity that opened it.
func (v View) Session(id locktable.SessionID) (SessionMeta, bool) {
	rec, ok := v.f.sessions[id]
	if !ok {
		return SessionMeta{}, false
	}
	return rec.meta(id), true
}

// HighestSeq returns the highest request sequence number session id has
// used in applied requests (0 if none, or if the session is not open): a
// request with a higher one is new, neither a retry nor stale.
func (v View) HighestSeq(id locktable.SessionID) uint64 {
	rec, ok := v.f.sessions[id]
	if !ok {
		return 0
	}
	return rec.highest()
}

// Sessions returns every open session's record, in id order.
func (v View) Sessions() []SessionMeta {
	out := make([]SessionMeta, 0, len(v.f.sessions))
	for id, s := range v.f.sessions {
		out = append(out, s.meta(id))
	}
	slices.SortFunc(out, func(a, b SessionMeta) int { return cmpID(a.ID, b.ID) })
	return out
}

// Resumable reports whether token is session id's resume token, in
// constant time; false if the session is not open or was recorded without
// a token (opened by an older server).
func (v View) Resumable(id locktable.SessionID, token []byte) bool {
	rec, ok := v.f.sessions[id]
	return ok && rec.resumableWith(token)
}

// Sessions returns the open sessions' records, in id order.
func (f *FSM) Sessions() []SessionMeta {
	var out []SessionMeta
	f.Read(func(v View) { out = v.Sessions() })
	return out
}

// Usage returns how many sessions identity owner has open and how many
// locks, held or queued, they have.
func (v View) Usage(owner string) (sessions, locks int) {
	u := v.f.usage.of(owner)
	return u.sessions, u.locks
}

// Quotas returns the quotas the state machine enforces.
func (f *FSM) Quotas() Quotas { return f.quotas }

package locktable

import (
	"fmt"
	"slices"

	"github.com/dlmhq/dlm/driver"
)

// LockState is where a lock stands, in listings.
type LockState uint8

// The states of a lock.
const (
	// LockWaiting: a new request in the wait queue.
	LockWaiting LockState = iota + 1
	// LockGranted: held, nothing pending.
	LockGranted
	// LockConverting: held in Mode, queued for Requested.
	LockConverting
)

// String returns the name of the state.
func (s LockState) String() string {
	switch s {
	case LockWaiting:
		return "waiting"
	case LockGranted:
		return "granted"
	case LockConverting:
		return "converting"
	}
	return fmt.Sprintf("LockState(%d)", uint8(s))
}

// LockInfo describes one lock or request. Times are Unix nanoseconds of the
// table clock; zero when not applicable.
type LockInfo struct {
	ID        LockID
	Session   SessionID
	Owner     OwnerID
	Resource  string      // the resource name
	Kind      Kind        // the resource kind
	State     LockState   // waiting, granted or converting
	Mode      driver.Mode // granted mode (zero while waiting, and for semaphores)
	Requested driver.Mode // mode asked for while waiting or converting
	Permits   uint32      // semaphore permits, held or asked for
	Token     uint64      // fencing token of the current grant
	GrantedAt int64       // when the current mode was granted
	QueuedAt  int64       // when the pending request was queued
	Deadline  int64       // of the pending request; 0 for none
}

// ResourceInfo describes a resource: its holders in grant order and its
// queues in order (the head first).
type ResourceInfo struct {
	Name       string
	Kind       Kind
	Capacity   uint32     // semaphores: total permits
	Used       uint32     // semaphores: permits granted
	Holders    []LockInfo // granted locks, in grant order (converting ones too)
	Converting []LockInfo // the conversion queue, head first
	Waiting    []LockInfo // the wait queue, head first

	// HoldersTotal, ConvertingTotal and WaitingTotal are the full lengths
	// of the three lists. In a page (see ResourcePage) the slices above can
	// hold less.
	HoldersTotal, ConvertingTotal, WaitingTotal int
	// First is the position of the first entry described, in Holders,
	// Converting and Waiting taken as one list: 0 unless a page continues
	// a resource cut by the page before.
	First int
	// Continues reports that a page cut the resource: the rest of it
	// follows on the next page.
	Continues bool
}

// SessionInfo describes a session and its locks, in id order.
type SessionInfo struct {
	ID       SessionID
	Label    string     // as given to OpenSession
	OpenedAt int64      // table time of OpenSession
	Locks    []LockInfo // held and queued, in id order

	// LocksTotal is the number of locks of the session (in a page, those
	// the query keeps); Locks can hold less in a page (see SessionPage).
	LocksTotal int
	// First is the position of Locks[0] among them: 0 unless a page
	// continues a session cut by the page before.
	First int
	// Continues reports that a page cut the session: the rest of its locks
	// follow on the next page.
	Continues bool
}

// info describes lock l.
func (l *lock) info() LockInfo {
	li := LockInfo{
		ID:       l.id,
		Session:  l.sess.id,
		Owner:    l.owner,
		Resource: l.res.name,
		Kind:     l.res.kind,
		State:    LockState(l.state),
		Permits:  l.permits,
		QueuedAt: l.queuedAt,
		Deadline: l.deadline,
	}
	if l.granted() {
		li.Mode, li.Token, li.GrantedAt = l.mode, l.token, l.grantedAt
	}
	if l.state != stateGranted {
		li.Requested = l.want
	}
	return li
}

// lockInfos describes the locks of a list, in order.
func lockInfos(ls *lockList, k int) []LockInfo {
	if ls.n == 0 {
		return nil
	}
	out := make([]LockInfo, 0, ls.n)
	for l := ls.head; l != nil; l = l.link[k].next {
		out = append(out, l.info())
	}
	return out
}

// Describe returns lock id, and false if there is none.
func (t *Table) Describe(id LockID) (LockInfo, bool) {
	l := t.locks[id]
	if l == nil {
		return LockInfo{}, false
	}
	return l.info(), true
}

// Waiters returns how many requests and conversions wait on the resource
// named name.
func (t *Table) Waiters(name string) int {
	if r := t.resources[name]; r != nil {
		return r.waiters()
	}
	return 0
}

// Resource describes the resource named name, and false if it has no lock
// and no waiter (it does not exist).
func (t *Table) Resource(name string) (ResourceInfo, bool) {
	r := t.resources[name]
	if r == nil {
		return ResourceInfo{}, false
	}
	return r.info(), true
}

// info describes resource r in full.
func (r *resource) info() ResourceInfo { return r.piece(0, r.entries()) }

// Resources lists resources in name order, starting after the name after
// ("" for the first page), at most limit of them (all if limit <= 0). It
// sorts every name, so it is meant for listings, not hot paths.
func (t *Table) Resources(after string, limit int) []ResourceInfo {
	return t.ResourcesWithPrefix("", after, limit)
}

// ResourcesWithPrefix is Resources restricted to names that begin with
// prefix.
func (t *Table) ResourcesWithPrefix(prefix, after string, limit int) []ResourceInfo {
	return t.ResourcesMatching(prefix, after, limit, nil)
}

// Session describes session id, and false if it is not open.
func (t *Table) Session(id SessionID) (SessionInfo, bool) {
	s := t.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(), true
}

// SessionLabel returns the label session id was opened with, and false if
// it is not open.
func (t *Table) SessionLabel(id SessionID) (string, bool) {
	s := t.sessions[id]
	if s == nil {
		return "", false
	}
	return s.label, true
}

// info describes session s.
func (s *session) info() SessionInfo {
	return SessionInfo{ID: s.id, Label: s.label, OpenedAt: s.openedAt, Locks: lockInfos(&s.locks, linkSession), LocksTotal: s.locks.n}
}

// Sessions lists sessions in id order, starting after id after (0 for the
// first page), at most limit of them (all if limit <= 0).
func (t *Table) Sessions(after SessionID, limit int) []SessionInfo {
	ids := t.sortedSessionIDs(after)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]SessionInfo, len(ids))
	for i, id := range ids {
		out[i] = t.sessions[id].info()
	}
	return out
}

// sortedSessionIDs returns the ids of the open sessions above after, in
// order.
func (t *Table) sortedSessionIDs(after SessionID) []SessionID {
	ids := make([]SessionID, 0, len(t.sessions))
	for id := range t.sessions {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

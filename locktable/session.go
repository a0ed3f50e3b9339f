package locktable

import (
	"fmt"
	"slices"
)

// session is an open session: the unit of liveness. Its locks and requests
// die with it.
type session struct {
	id       SessionID
	label    string
	openedAt int64
	locks    lockList // every lock and request, in id order
}

// OpenSession opens session id. label is free text shown in listings (a
// client name, a host), at most Limits.MaxNameLen bytes. The table does not
// track liveness: the caller decides when a session ends and calls
// CloseSession or ExpireSessions.
func (t *Table) OpenSession(st Stamp, id SessionID, label string) error {
	t.begin(st)
	switch {
	case id == 0:
		return fmt.Errorf("%w: session id 0", ErrInvalidArgument)
	case t.sessions[id] != nil:
		return fmt.Errorf("%w: %d", ErrSessionExists, id)
	case len(label) > t.lim.MaxNameLen:
		return fmt.Errorf("%w: session label is %d bytes, the limit is %d", ErrNameTooLong, len(label), t.lim.MaxNameLen)
	case len(t.sessions) >= t.lim.MaxSessions:
		return fmt.Errorf("%w: %d sessions open", ErrTooManySessions, len(t.sessions))
	}
	t.sessions[id] = &session{id: id, label: label, openedAt: t.now}
	return nil
}

// CloseSession closes session id: it releases its locks (EventReleased),
// cancels its queued requests (EventCancelled), emits EventSessionClosed,
// then grants what became grantable.
func (t *Table) CloseSession(st Stamp, id SessionID) (Result, error) {
	t.begin(st)
	s, err := t.session(id)
	if err != nil {
		return Result{}, err
	}
	t.dropSession(s, ReasonSessionClosed)
	t.settle()
	return t.result(0, StatusNone, 0), nil
}

// ExpireSessions ends the given sessions like CloseSession, with reason
// ReasonSessionExpired and EventSessionExpired. Ids are handled in
// increasing order; unknown ids are ignored, so a repeated expiry is
// harmless. Every lock and request of every listed session is removed
// before anything is granted.
func (t *Table) ExpireSessions(st Stamp, ids []SessionID) Result {
	t.begin(st)
	t.ids = append(t.ids[:0], ids...)
	slices.Sort(t.ids)
	for i, id := range t.ids {
		if i > 0 && id == t.ids[i-1] {
			continue
		}
		if s := t.sessions[id]; s != nil {
			t.dropSession(s, ReasonSessionExpired)
		}
	}
	t.settle()
	return t.result(0, StatusNone, 0)
}

// dropSession removes session s and everything it holds or waits for,
// without granting anything yet (see settle).
func (t *Table) dropSession(s *session, reason Reason) {
	for l := s.locks.head; l != nil; {
		next := l.link[linkSession].next
		t.dropLock(l, reason)
		l = next
	}
	delete(t.sessions, s.id)
	kind := EventSessionClosed
	if reason == ReasonSessionExpired {
		kind = EventSessionExpired
	}
	t.emit(Event{Kind: kind, Reason: reason, Session: s.id})
}

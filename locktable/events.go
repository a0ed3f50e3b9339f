package locktable

import (
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of events. Every state change of a lock or request produces one
// event, including the caller's own immediate grant or release, so that a
// server can push every change from one place.
const (
	// EventGranted: a lock was granted, or a conversion completed
	// (Conversion is true). Mode is the new granted mode, Token its fencing
	// token (a down-conversion keeps its token).
	EventGranted EventKind = iota + 1
	// EventBlocking: the lock (a holder) blocks a queued request for Mode,
	// or for Permits permits of a semaphore. It is a polite request to
	// release or down-convert. A holder is told at most once per mode it
	// could yield to, until its own mode changes.
	EventBlocking
	// EventReleased: a granted lock is gone. Reason says why; Mode is the
	// mode it was held in.
	EventReleased
	// EventCancelled: a queued request or conversion was removed before it
	// was granted. Reason says why; Mode is the requested mode. For a
	// conversion (Conversion is true) the lock stays granted in its old
	// mode.
	EventCancelled
	// EventTimedOut: a queued request or conversion reached its deadline.
	// Mode is the requested mode. For a conversion (Conversion is true) the
	// lock stays granted in its old mode.
	EventTimedOut
	// EventSessionClosed: the session was closed; it follows the events of
	// its locks. Only Session is set.
	EventSessionClosed
	// EventSessionExpired: the session was expired; it follows the events
	// of its locks. Only Session is set.
	EventSessionExpired
)

var eventKindNames = [...]string{
	EventGranted:        "Granted",
	EventBlocking:       "Blocking",
	EventReleased:       "Released",
	EventCancelled:      "Cancelled",
	EventTimedOut:       "TimedOut",
	EventSessionClosed:  "SessionClosed",
	EventSessionExpired: "SessionExpired",
}

// String returns the name of the kind, such as "Granted".
func (k EventKind) String() string {
	if k >= EventGranted && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Reason says why a lock was released or a request cancelled.
type Reason uint8

// The reasons of EventReleased and EventCancelled.
const (
	// ReasonNone is the reason of events that have none.
	ReasonNone Reason = iota
	// ReasonRequested: the session asked (Release or Cancel).
	ReasonRequested
	// ReasonSessionClosed: the session was closed.
	ReasonSessionClosed
	// ReasonSessionExpired: the session was expired.
	ReasonSessionExpired
)

var reasonNames = [...]string{
	ReasonNone:           "None",
	ReasonRequested:      "Requested",
	ReasonSessionClosed:  "SessionClosed",
	ReasonSessionExpired: "SessionExpired",
}

// String returns the name of the reason, such as "SessionExpired".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Event is one effect of an operation, for the caller to push to clients.
// Lock, Session, Owner and Resource identify the lock concerned (for
// EventBlocking, the holder being asked to yield).
type Event struct {
	Kind     EventKind
	Reason   Reason    // for Released and Cancelled
	Lock     LockID    // the lock concerned
	Session  SessionID // its session
	Owner    OwnerID   // its owner
	Resource string    // its resource
	// Mode depends on Kind: the granted mode (Granted, Released), the
	// requested mode (Cancelled, TimedOut), or the mode a waiter wants
	// (Blocking). It is zero for semaphores.
	Mode driver.Mode
	// Permits is the permit count of a semaphore lock (for Blocking, the
	// permits the waiter wants); zero for locks.
	Permits uint32
	// Token is the lock's fencing token (Granted, Released).
	Token uint64
	// Conversion marks events about a conversion of a granted lock.
	Conversion bool
}

// String formats the event for logs and test failures.
func (e Event) String() string {
	switch e.Kind {
	case EventSessionClosed, EventSessionExpired:
		return fmt.Sprintf("%v session=%d", e.Kind, e.Session)
	}
	s := fmt.Sprintf("%v lock=%d session=%d owner=%d resource=%q", e.Kind, e.Lock, e.Session, e.Owner, e.Resource)
	if e.Mode != 0 {
		s += " mode=" + e.Mode.String()
	}
	if e.Permits != 0 {
		s += fmt.Sprintf(" permits=%d", e.Permits)
	}
	if e.Token != 0 {
		s += fmt.Sprintf(" token=%d", e.Token)
	}
	if e.Conversion {
		s += " conversion"
	}
	if e.Reason != ReasonNone {
		s += " reason=" + e.Reason.String()
	}
	return s
}

// emit appends an event to the current operation's events.
func (t *Table) emit(e Event) { t.events = append(t.events, e) }

// emitLock appends an event about lock l. Mode is the requested mode for
// pending-request kinds and the granted mode otherwise.
func (t *Table) emitLock(kind EventKind, l *lock, mode driver.Mode, reason Reason, conversion bool) {
	t.events = append(t.events, Event{
		Kind:       kind,
		Reason:     reason,
		Lock:       l.id,
		Session:    l.sess.id,
		Owner:      l.owner,
		Resource:   l.res.name,
		Mode:       mode,
		Permits:    l.permits,
		Token:      l.token,
		Conversion: conversion,
	})
}

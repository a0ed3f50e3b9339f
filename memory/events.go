package memory

import (
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// dispatch acts on the table's events: every event signals the watches of
// its resource; grants reach their waiters (and start their TTL, or give a
// converted lock a fresh Blocking channel); blocking notices close the
// holder's channel; timeouts fail their waiters; expired sessions leave the
// indexes. Sessions that a timeout leaves empty are closed after the
// events are read, since the table reuses its events' slice.
func (s *Store) dispatch(events []locktable.Event) {
	var empty []locktable.SessionID
	for _, ev := range events {
		if ev.Resource != "" {
			s.signal(ev.Resource)
		}
		e := s.byLock[ev.Lock]
		if e == nil {
			continue
		}
		switch ev.Kind {
		case locktable.EventGranted:
			if !ev.Conversion {
				e.mode = ev.Mode
				s.granted(e)
			} else if ev.Mode != e.mode {
				e.mode = ev.Mode
				e.blocking, e.blocked = make(chan struct{}), false
			}
			if e.wait != nil {
				s.finish(e, outcome{token: ev.Token, start: time.Now(), blocking: e.blocking})
			}
		case locktable.EventBlocking:
			if !e.blocked {
				e.blocked = true
				close(e.blocking)
			}
		case locktable.EventTimedOut:
			if ev.Conversion || e.granted {
				s.finish(e, outcome{err: fmt.Errorf("%w: conversion of %q timed out", driver.ErrTaken, ev.Resource)})
				continue
			}
			s.finish(e, outcome{err: fmt.Errorf("%w: %q: wait deadline passed", driver.ErrTaken, ev.Resource)})
			s.forget(e)
			if sid := s.vacate(e); sid != 0 {
				empty = append(empty, sid)
			}
		case locktable.EventReleased:
			if ev.Reason == locktable.ReasonSessionExpired {
				s.finish(e, outcome{err: expired(ev.Resource)})
				s.forget(e)
			}
		}
	}
	for _, sid := range empty {
		s.closeSession(sid)
	}
}

// expired is the error of a request pending on a lock whose TTL ran out.
func expired(resource string) error {
	return fmt.Errorf("%w: %q expired", driver.ErrNotHeld, resource)
}

package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Extend restarts the TTL of the lock held by req.Owner.
func (s *Store) Extend(ctx context.Context, req driver.Request, _ driver.Grant) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.holder(req)
	if err != nil {
		return err
	}
	e.ttl = req.TTL
	e.expires = s.now().Now + int64(e.ttl)
	s.expiry.set(e)
	s.arm()
	return nil
}

// Release frees the lock held by req.Owner and grants what became
// grantable.
func (s *Store) Release(ctx context.Context, req driver.Request, _ driver.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.holder(req)
	if err != nil {
		return err
	}
	s.drop(e)
	return nil
}

// holder returns the granted acquisition of req.Owner.
func (s *Store) holder(req driver.Request) (*entry, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	e := s.byOwner[req.Owner]
	if e == nil || !e.granted {
		return nil, fmt.Errorf("%w: %q is not held by this owner (expired or released)", driver.ErrNotHeld, req.Resource)
	}
	return e, nil
}

// drop closes the acquisition's session, which releases or cancels its lock,
// and pushes the grants that follow.
func (s *Store) drop(e *entry) {
	s.finish(e, outcome{err: fmt.Errorf("%w: the lock was released", driver.ErrNotHeld)})
	res, _ := s.tab.CloseSession(s.now(), e.session)
	s.forget(e)
	s.dispatch(res.Events)
	s.arm()
}

// forget removes an acquisition from the store's indexes.
func (s *Store) forget(e *entry) {
	delete(s.byOwner, e.owner)
	delete(s.byLock, e.lock)
	s.expiry.remove(e)
	e.granted = false
}

// finish ends e's pending request, if any, with o.
func (s *Store) finish(e *entry, o outcome) {
	if e.wait != nil {
		e.wait <- o
		e.wait = nil
	}
}

// dispatch acts on the table's events: grants reach their waiters (and
// start their TTL); timeouts fail them; expired sessions leave the indexes.
func (s *Store) dispatch(events []locktable.Event) {
	for _, ev := range events {
		e := s.byLock[ev.Lock]
		if e == nil {
			continue
		}
		switch ev.Kind {
		case locktable.EventGranted:
			if !ev.Conversion {
				s.granted(e)
			}
			s.finish(e, outcome{token: ev.Token, start: time.Now()})
		case locktable.EventTimedOut:
			if ev.Conversion || e.granted {
				s.finish(e, outcome{err: fmt.Errorf("%w: conversion of %q timed out", driver.ErrTaken, ev.Resource)})
				continue
			}
			s.finish(e, outcome{err: fmt.Errorf("%w: %q: wait deadline passed", driver.ErrTaken, ev.Resource)})
			res, _ := s.tab.CloseSession(s.now(), e.session)
			s.forget(e)
			defer s.dispatch(res.Events)
		case locktable.EventReleased:
			if ev.Reason == locktable.ReasonSessionExpired {
				s.forget(e)
			}
		}
	}
}

package dlmserver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// Acquire makes one attempt: a try-lock that the server refuses at once if
// the lock cannot be granted.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return s.lock(ctx, req, true)
}

// AcquireWait queues the request in the server and waits for the grant,
// which the server pushes, or for ctx to end (the request is then withdrawn).
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return s.lock(ctx, req, false)
}

func (s *Store) lock(ctx context.Context, req driver.Request, noQueue bool) (driver.Grant, error) {
	lr := &dlmpb.LockRequest{Resource: req.Resource, NoQueue: noQueue, Metadata: []byte(req.Metadata)}
	if req.Capacity > 0 {
		if req.Capacity > math.MaxUint32 || req.Permits <= 0 || req.Permits > req.Capacity {
			return driver.Grant{}, fmt.Errorf("%w: semaphore of %d permits, %d asked", driver.ErrInvalid, req.Capacity, req.Permits)
		}
		lr.Capacity, lr.Permits = uint32(req.Capacity), uint32(req.Permits)
	} else {
		if !req.Mode.Valid() {
			return driver.Grant{}, fmt.Errorf("%w: mode %v", driver.ErrInvalid, req.Mode)
		}
		lr.Mode = dlmpb.Mode(req.Mode)
	}

	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	if s.st.conn == nil {
		err := s.unavailableLocked("not connected to the dlm server")
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	ls := newLockState(s.st.ownerFor(req.Group), req)
	lr.Owner = ls.owner
	s.st.byOwner[req.Owner] = ls
	c := s.sendLocked(callLock, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
		lr.Id = s.reqID(seq)
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: lr}}
	})
	s.mu.Unlock()

	if err := s.await(ctx, c); err != nil {
		return driver.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls.gone {
		return driver.Grant{}, fmt.Errorf("%w: %q was lost as it was granted", driver.ErrUnavailable, req.Resource)
	}
	return s.grantOf(ls), nil
}

// grantOf returns the grant of a granted lock.
func (s *Store) grantOf(ls *lockState) driver.Grant {
	return driver.Grant{Token: ls.token, Handle: ls, Start: time.Now(), Lost: ls.lost, Blocking: ls.blocking}
}

// Extend succeeds while the lock is held and the session is alive: locks
// live as long as the session, which the keepalives extend.
func (s *Store) Extend(_ context.Context, req driver.Request, g driver.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.held(req, g)
	switch {
	case ls == nil || ls.gone || !ls.granted:
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, req.Resource)
	case !time.Now().Before(s.st.validUntil):
		return fmt.Errorf("%w: %q: the session could not be kept alive", driver.ErrNotHeld, req.Resource)
	}
	return nil
}

// Release releases the lock (or withdraws the request).
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	s.mu.Lock()
	ls := s.held(req, g)
	if ls == nil || ls.gone {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, req.Resource)
	}
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if ls.id == 0 { // still unanswered: release it when the answer comes
		if c := s.callOf(ls); c != nil {
			c.abandoned = true
		}
		s.mu.Unlock()
		return nil
	}
	c := s.sendLocked(callRelease, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
			Id: s.reqID(seq), LockId: ls.id,
		}}}
	})
	s.mu.Unlock()
	return s.await(ctx, c)
}

// Convert converts the lock to mode, waiting in the server's conversion
// queue if needed.
func (s *Store) Convert(ctx context.Context, req driver.Request, g driver.Grant, mode driver.Mode) (driver.Grant, error) {
	if !mode.Valid() || req.Capacity > 0 {
		return driver.Grant{}, fmt.Errorf("%w: conversion to %v", driver.ErrInvalid, mode)
	}
	s.mu.Lock()
	ls := s.held(req, g)
	if ls == nil || ls.gone || !ls.granted {
		s.mu.Unlock()
		return driver.Grant{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, req.Resource)
	}
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	target := dlmpb.Mode(mode)
	c := s.sendLocked(callConvert, ls, target, ls.mode, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
			Id: s.reqID(seq), LockId: ls.id, Mode: target,
		}}}
	})
	s.mu.Unlock()
	if weaker(target, c.from) {
		// A down-conversion never waits in the server: its answer is one
		// round trip away, and abandoning it could leave the server and
		// the lease disagreeing on the mode. It ends early only if the
		// session is lost.
		ctx = context.WithoutCancel(ctx)
	}
	if err := s.await(ctx, c); err != nil {
		return driver.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantOf(ls), nil
}

// weaker reports whether mode to conflicts with no more modes than from:
// converting from from to to is then granted in place.
func weaker(to, from dlmpb.Mode) bool {
	for m := driver.Mode(1); m.Valid(); m++ {
		if m.Compatible(driver.Mode(from)) && !m.Compatible(driver.Mode(to)) {
			return false
		}
	}
	return true
}

// held returns the lock of a grant, or of the request's owner.
func (s *Store) held(req driver.Request, g driver.Grant) *lockState {
	if ls, ok := g.Handle.(*lockState); ok && ls != nil {
		return ls
	}
	return s.st.byOwner[req.Owner]
}

// callOf returns the unanswered call of a lock.
func (s *Store) callOf(ls *lockState) *call {
	for _, c := range s.st.calls {
		if c.lock == ls {
			return c
		}
	}
	return nil
}

// unavailableLocked is the error of a call that cannot be sent now (what
// says why): dlm.ErrUnavailable, or the ErrStorage a server answered
// meanwhile, naming its cause.
func (s *Store) unavailableLocked(what string) error {
	if s.st.storage != nil {
		return fmt.Errorf("%s (reconnecting): %w", what, s.st.storage)
	}
	return fmt.Errorf("%w: %s (reconnecting)", driver.ErrUnavailable, what)
}

// usableLocked returns why no request can be sent now, if so.
func (s *Store) usableLocked() error {
	switch {
	case s.st.closing:
		return fmt.Errorf("%w: the store is closed", driver.ErrUnavailable)
	case s.st.sid == 0 || !time.Now().Before(s.st.validUntil):
		return s.unavailableLocked("no live session with the dlm server")
	}
	return nil
}

// sendLocked registers a call and sends it on the current stream, if any;
// otherwise it goes out when the stream is back.
func (s *Store) sendLocked(kind callKind, ls *lockState, mode, from dlmpb.Mode, build func(seq uint64) *dlmpb.SessionRequest) *call {
	s.st.seq++
	c := &call{kind: kind, seq: s.st.seq, lock: ls, mode: mode, from: from, done: make(chan error, 1)}
	c.msg = build(c.seq)
	s.st.calls[c.seq] = c
	if conn := s.st.conn; conn != nil {
		conn.send(c.msg) // queued in order; a broken stream is seen by the receive loop
	}
	return c
}

// reissueLocked gives an unanswered call a fresh sequence number and sends
// it again: for a call the server called stale, which its session state
// showed was not applied.
func (s *Store) reissueLocked(c *call) {
	delete(s.st.calls, c.seq)
	s.st.seq++
	c.seq = s.st.seq
	id := s.reqID(c.seq)
	switch m := c.msg.GetMsg().(type) {
	case *dlmpb.SessionRequest_Lock:
		m.Lock.Id = id
	case *dlmpb.SessionRequest_Convert:
		m.Convert.Id = id
	case *dlmpb.SessionRequest_Release:
		m.Release.Id = id
	case *dlmpb.SessionRequest_Cancel:
		m.Cancel.Id = id
	case *dlmpb.SessionRequest_Relabel:
		m.Relabel.Id = id
	}
	s.st.calls[c.seq] = c
	if conn := s.st.conn; conn != nil {
		conn.send(c.msg)
	}
}

// reqID is the id of request seq of the current session.
func (s *Store) reqID(seq uint64) *dlmpb.RequestID {
	return &dlmpb.RequestID{Session: s.st.sid, Seq: seq}
}

// await waits for a call's outcome. If ctx ends first the call is abandoned:
// whatever it still obtains is undone, and the error wraps driver.ErrTaken
// and ctx's error.
func (s *Store) await(ctx context.Context, c *call) error {
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case err := <-c.done: // answered meanwhile
		if err != nil || (c.kind != callLock && c.kind != callConvert) {
			return err
		}
		c.abandoned = true
		s.undoLocked(c)
	default:
		c.abandoned = true
		if c.lock.waiter == c { // queued: withdraw it
			c.lock.waiter = nil
			s.undoLocked(c)
		}
	}
	if c.kind == callRelease || c.kind == callCancel || c.kind == callRelabel {
		return fmt.Errorf("%w: no answer from the dlm server: %w", driver.ErrUnavailable, ctx.Err())
	}
	return fmt.Errorf("%w: %w", driver.ErrTaken, ctx.Err())
}

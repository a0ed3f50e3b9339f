package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Acquire makes one attempt, without queueing: a request that would have
// to wait is refused with ErrTaken.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok, err := s.held(req); ok || err != nil {
		return g, err
	}
	e, res, err := s.request(req, locktable.NoQueue, 0)
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: res.Token, Blocking: e.blocking}, nil
}

// AcquireWait queues the request and blocks until it is granted or ctx
// ends. A deadline of ctx becomes the request's wait deadline in the table.
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	s.mu.Lock()
	if g, ok, err := s.held(req); ok || err != nil {
		s.mu.Unlock()
		return g, err
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = int64(d.Sub(s.epoch)) + 1
	}
	e, res, err := s.request(req, 0, deadline)
	if err != nil {
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	if res.Status == locktable.StatusGranted {
		s.mu.Unlock()
		return driver.Grant{Token: res.Token, Blocking: e.blocking}, nil
	}
	wait := make(chan outcome, 1)
	e.wait = wait
	s.arm()
	s.mu.Unlock()
	o, err := s.await(ctx, wait, func() {
		s.drop(e)
	})
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: o.token, Start: o.start, Blocking: o.blocking}, nil
}

// held returns the grant of an acquisition already made by req.Owner, so
// that a retried attempt is idempotent.
func (s *Store) held(req driver.Request) (driver.Grant, bool, error) {
	if err := s.usable(); err != nil {
		return driver.Grant{}, false, err
	}
	e := s.byOwner[req.Owner]
	if e == nil || !e.granted {
		return driver.Grant{}, false, nil
	}
	info, _ := s.tab.Describe(e.lock)
	return driver.Grant{Token: info.Token, Blocking: e.blocking}, true, nil
}

// request asks the table for req's lock or permits, in a session of its
// own or in its group's. A request granted at once has its TTL started.
// On an error nothing is left behind.
func (s *Store) request(req driver.Request, flags locktable.Flags, deadline int64) (*entry, locktable.Result, error) {
	st := s.now()
	sid, g, err := s.sessionFor(st, req)
	if err != nil {
		return nil, locktable.Result{}, tableErr(err)
	}
	var res locktable.Result
	if req.Capacity > 0 {
		res, err = s.tab.AcquirePermits(st, locktable.SemaphoreRequest{
			Session: sid, Owner: locktable.OwnerID(sid), Resource: req.Resource,
			Capacity: uint32(req.Capacity), Permits: uint32(req.Permits),
			Flags: flags, Deadline: deadline,
		})
	} else {
		res, err = s.tab.Lock(st, locktable.LockRequest{
			Session: sid, Owner: locktable.OwnerID(sid), Resource: req.Resource,
			Mode: req.Mode, Flags: flags, Deadline: deadline,
		})
	}
	if err != nil {
		return nil, locktable.Result{}, s.refused(req, sid, g, err, flags)
	}
	e := &entry{
		owner: req.Owner, meta: req.Metadata, group: g, res: req.Resource, session: sid, lock: res.Lock,
		ttl: req.TTL, index: -1, blocking: make(chan struct{}),
	}
	if g != nil {
		g.link(e)
	}
	s.byOwner[req.Owner] = e
	s.byLock[res.Lock] = e
	s.dispatch(res.Events) // the grant, if made at once, starts the TTL
	if res.Status == locktable.StatusQueued {
		s.signal(req.Resource)
	}
	return e, res, nil
}

// refused closes the session that a refused request leaves empty and
// returns the request's error in the driver's terms; a deadlock in a group
// names the group and the cycle.
func (s *Store) refused(req driver.Request, sid locktable.SessionID, g *group, err error, flags locktable.Flags) error {
	switch {
	case g != nil && errors.Is(err, driver.ErrDeadlock):
		err = fmt.Errorf("%w (group %s%s)", tableErr(err), g.key, s.trace(g, locktable.LockInfo{
			Resource: req.Resource, State: locktable.LockWaiting, Requested: req.Mode, Permits: uint32(req.Permits),
		}))
	case flags&locktable.NoQueue != 0:
		err = fmt.Errorf("%w: %q", tableErr(err), req.Resource)
	default:
		err = tableErr(err)
	}
	if g == nil {
		s.closeSession(sid)
	} else {
		s.closeSession(s.idle(g))
	}
	return err
}

// await blocks until the pending request ends (on wait) or ctx ends; in the
// latter case it calls withdraw under the store's lock (unless the request
// ended meanwhile) and returns an error wrapping ErrTaken and ctx.Err().
func (s *Store) await(ctx context.Context, wait <-chan outcome, withdraw func()) (outcome, error) {
	select {
	case o := <-wait:
		if o.err == nil || !errors.Is(o.err, driver.ErrTaken) {
			return o, o.err
		}
		// Timed out by the table at ctx's deadline, which is passing now.
		<-ctx.Done()
		return outcome{}, fmt.Errorf("%w: %w", o.err, ctx.Err())
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case o := <-wait: // it ended as ctx did
		if o.err == nil {
			return o, nil
		}
	default:
		withdraw()
	}
	return outcome{}, fmt.Errorf("%w: %w", driver.ErrTaken, ctx.Err())
}

// granted starts the TTL of a newly granted acquisition.
func (s *Store) granted(e *entry) {
	e.granted = true
	e.expires = s.now().Now + int64(e.ttl)
	s.expiry.Set(e)
	s.arm()
}

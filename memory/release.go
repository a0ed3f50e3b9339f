package memory

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
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
	s.expiry.Set(e)
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

// drop takes the acquisition's lock or request out of the table (closing
// its session, or its group's once empty), and pushes the grants that
// follow.
func (s *Store) drop(e *entry) {
	if e.wait != nil {
		s.finish(e, outcome{err: fmt.Errorf("%w: the lock was released", driver.ErrNotHeld)})
	}
	s.forget(e)
	s.unlock(e)
	s.arm()
}

// forget removes an acquisition from the store's indexes.
func (s *Store) forget(e *entry) {
	delete(s.byOwner, e.owner)
	delete(s.byLock, e.lock)
	s.expiry.Remove(e)
	if e.group != nil {
		e.group.unlink(e)
	}
	e.granted = false
}

// finish ends e's pending request, if any, with o.
func (s *Store) finish(e *entry, o outcome) {
	if e.wait != nil {
		e.wait <- o
		e.wait = nil
	}
}

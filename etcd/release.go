package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// Extend renews nothing: the grant's key lives as long as its session's
// lease, which the store keeps alive in the background (see ValidUntil). It
// checks that the session lives and reads the grant's key, which must still
// be there with its create revision and lease: one read, no write. A
// session that ended, or a key that is gone, is driver.ErrNotHeld.
func (s *Store) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	t, err := s.lookup(ctx, req, g)
	if err != nil {
		return err
	}
	if err := s.alive(t); err != nil {
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, req.Resource, err)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, t.key)
	if err != nil {
		return s.fail(ctx, "read key", err)
	}
	if len(resp.Kvs) == 0 || !t.present(resp.Kvs[0]) {
		return fmt.Errorf("%w: %q: the key of the grant was deleted", driver.ErrNotHeld, req.Resource)
	}
	return nil
}

// alive returns why the ticket's session can no longer keep it, or nil.
func (s *Store) alive(t *ticket) error {
	if t.ss == nil {
		return nil // looked up by its key: the read decides
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case t.gone:
		return errors.New("released")
	case t.ss.ended:
		return t.ss.err
	case !time.Now().Before(t.ss.validUntil):
		return errors.New("the etcd session could not be kept alive")
	}
	return nil
}

// Release deletes the grant's key: one write. A key that was gone, or had
// been created again since the grant (and is deleted all the same), is
// driver.ErrNotHeld. When the delete fails, the store retries it at each of
// the session's keep-alives, so that the lock does not outlive its owner's
// interest while the session lives; a release of a request whose outcome was
// unknown (no handle) that fails ends the session of its TTL, whose lease
// then expires with every key under it.
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	t, err := s.lookup(ctx, req, g)
	if err != nil {
		if errors.Is(err, driver.ErrUnavailable) {
			s.abandon(req.TTL, err)
		}
		return err
	}
	s.endWatch(t)
	if s.swept(t) {
		return nil // an earlier Release failed, and the store deleted the key since
	}
	deleted, err := s.remove(ctx, t)
	switch {
	case err != nil:
		if t.ss == nil && errors.Is(err, driver.ErrUnavailable) {
			s.abandon(req.TTL, err)
		}
		return err
	case !deleted:
		return fmt.Errorf("%w: %q: the key of the grant was deleted", driver.ErrNotHeld, req.Resource)
	}
	return nil
}

// endWatch ends the watch of the ticket's Blocking channel, if one runs,
// and keeps one from starting.
func (s *Store) endWatch(t *ticket) {
	s.mu.Lock()
	stop := t.stop
	t.released = true
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// swept reports whether the store deleted the ticket's key itself, after a
// Release that failed.
func (s *Store) swept(t *ticket) bool {
	if t.ss == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.swept
}

// lookup returns the ticket of a grant. A grant without one (package dlm
// releases the outcome of an attempt whose reply was lost with an empty
// grant) is looked up by its owner, among the keys of its resource's queue
// (one read), and checked against its token when it has one.
func (s *Store) lookup(ctx context.Context, req driver.Request, g driver.Grant) (*ticket, error) {
	if err := s.check(req); err != nil {
		return nil, err
	}
	if t, ok := g.Handle.(*ticket); ok && t != nil {
		return t, nil
	}
	// A create of the request given up in flight may still be applied:
	// the store settles it first.
	if err := s.awaitCreates(ctx, req.Resource, req.Owner); err != nil {
		return nil, s.fail(ctx, "read queue", err)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.dir(req.Resource), queueOps()...)
	if err != nil {
		return nil, s.fail(ctx, "read queue", err)
	}
	for _, kv := range resp.Kvs {
		if _, owner, _ := parseValue(kv); owner != req.Owner {
			continue
		}
		if g.Token != 0 && uint64(kv.CreateRevision) != g.Token {
			return nil, fmt.Errorf("%w: %q: the key of the grant was created again", driver.ErrNotHeld, req.Resource)
		}
		return &ticket{key: string(kv.Key), resource: req.Resource, owner: req.Owner,
			rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}, nil
	}
	s.retireSlots(req.Resource, req.Owner)
	return nil, fmt.Errorf("%w: %q is not locked by this owner", driver.ErrNotHeld, req.Resource)
}

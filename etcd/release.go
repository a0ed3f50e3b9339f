package etcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// Extend renews the grant's lease with one KeepAliveOnce, then checks that
// the grant's key is still there with its create revision and lease. The
// lease keeps the TTL it was granted with. A lease or key that is gone is
// driver.ErrNotHeld.
func (s *Store) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	t, err := s.lookup(ctx, req, g)
	if err != nil {
		return err
	}
	if err := s.keepAlive(ctx, t.lease); err != nil {
		if errors.Is(err, errLeaseGone) {
			return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, req.Resource, err)
		}
		return err
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

// Release deletes the grant's key if it still has the grant's create
// revision, then revokes the grant's lease. A key that is gone (or was
// created again) is driver.ErrNotHeld. A lease that cannot be revoked after
// the key was deleted is not an error: it expires by itself.
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	t, err := s.lookup(ctx, req, g)
	if err != nil {
		return err
	}
	if t.stop != nil {
		t.stop() // the Blocking watch
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(clientv3.OpDelete(t.key)).
		Commit()
	if err != nil {
		return s.fail(ctx, "delete key", err)
	}
	s.drop(ctx, t.lease)
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q: the key of the grant was deleted", driver.ErrNotHeld, req.Resource)
	}
	return nil
}

// lookup returns the ticket of a grant. A grant without one (package dlm
// releases the outcome of an attempt whose reply was lost with an empty
// grant) is looked up by its key, which is unique to req.Owner, and checked
// against its token when it has one.
func (s *Store) lookup(ctx context.Context, req driver.Request, g driver.Grant) (*ticket, error) {
	if err := s.check(req); err != nil {
		return nil, err
	}
	if t, ok := g.Handle.(*ticket); ok && t != nil {
		return t, nil
	}
	key := s.key(req.Resource, req.Owner)
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, key)
	if err != nil {
		return nil, s.fail(ctx, "read key", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %q is not locked by this owner", driver.ErrNotHeld, req.Resource)
	}
	kv := resp.Kvs[0]
	if g.Token != 0 && uint64(kv.CreateRevision) != g.Token {
		return nil, fmt.Errorf("%w: %q: the key of the grant was created again", driver.ErrNotHeld, req.Resource)
	}
	return &ticket{key: key, rev: kv.CreateRevision, lease: clientv3.LeaseID(kv.Lease)}, nil
}

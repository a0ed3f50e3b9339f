package etcd

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// Acquire makes one attempt, without waiting: it queues the request and,
// when a conflicting request was queued first, leaves the queue again and
// returns driver.ErrTaken. It takes two round trips when granted (lease,
// transaction) and three when not (and the revoke).
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	t, kvs, rev, err := s.enqueue(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	if b := blocker(kvs, t.rev, req.Mode); b != nil {
		s.drop(ctx, t.lease)
		return driver.Grant{}, taken(req.Resource, b)
	}
	return s.granted(req, t, kvs, rev), nil
}

// enqueue grants the request's lease and creates its key under it, in one
// transaction with the read of the resource's queue. A key that exists
// already belongs to an earlier attempt of the same request whose reply was
// lost: it keeps its place and its lease, and the new lease is revoked.
// enqueue returns the ticket, the queue, and the revision of the read.
func (s *Store) enqueue(ctx context.Context, req driver.Request) (*ticket, []*mvccpb.KeyValue, int64, error) {
	asked := time.Now()
	lease, err := s.grantLease(ctx, req.TTL)
	if err != nil {
		return nil, nil, 0, err
	}
	key := s.key(req.Resource, req.Owner)
	list := clientv3.OpGet(s.dir(req.Resource), queueOps()...)
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value(req), clientv3.WithLease(lease.ID)), list).
		Else(list).
		Commit()
	if err != nil {
		s.drop(ctx, lease.ID) // the transaction may have been applied
		return nil, nil, 0, s.fail(ctx, "create key", err)
	}
	kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs
	t := &ticket{key: key, rev: resp.Header.Revision, lease: lease.ID, ttl: time.Duration(lease.TTL) * time.Second, renewed: asked}
	if !resp.Succeeded {
		s.drop(ctx, lease.ID)
		for _, kv := range kvs {
			if string(kv.Key) == key {
				t.rev, t.lease = kv.CreateRevision, clientv3.LeaseID(kv.Lease)
			}
		}
	}
	return t, kvs, resp.Header.Revision, nil
}

// taken is the error of a request that b comes before.
func taken(resource string, b *mvccpb.KeyValue) error {
	return fmt.Errorf("%w: %q: a %s request queued first (revision %d)",
		driver.ErrTaken, resource, modeOf(b), b.CreateRevision)
}

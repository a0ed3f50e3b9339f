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
// returns driver.ErrTaken. It takes one round trip (one write) when granted
// and two when not (and the delete), plus a lease grant when the session
// of the request's TTL is not open yet.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	t, kvs, rev, err := s.enqueue(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	if b := blocker(kvs, t.rev, req.Mode); b != nil {
		_, _ = s.remove(context.WithoutCancel(ctx), t)
		return driver.Grant{}, taken(req.Resource, b)
	}
	return s.granted(req, t, kvs, rev), nil
}

// enqueue creates the request's key under its session's lease, in one
// transaction with the read of the resource's queue. A key that exists
// already belongs to an earlier attempt of the same request whose reply was
// lost: it keeps its place and its lease. enqueue returns the ticket, the
// queue, and the revision of the read.
func (s *Store) enqueue(ctx context.Context, req driver.Request) (*ticket, []*mvccpb.KeyValue, int64, error) {
	ss, err := s.session(ctx, req.TTL)
	if err != nil {
		return nil, nil, 0, err
	}
	asked := time.Now()
	key := s.key(req.Resource, req.Owner)
	list := clientv3.OpGet(s.dir(req.Resource), queueOps()...)
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, value(req), clientv3.WithLease(ss.id)), list).
		Else(list).
		Commit()
	if err != nil {
		// The transaction may have been applied: package dlm releases
		// the request with an empty grant (see Release).
		s.unref(ss)
		return nil, nil, 0, s.fail(ctx, "create key", err)
	}
	kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs
	t := &ticket{key: key, rev: resp.Header.Revision, lease: ss.id, ss: ss, renewed: asked}
	if !resp.Succeeded {
		for _, kv := range kvs {
			if string(kv.Key) == key {
				t.rev, t.lease = kv.CreateRevision, clientv3.LeaseID(kv.Lease)
			}
		}
		if t.lease != ss.id {
			// Under a session that ended: nobody keeps its lease alive,
			// so the key cannot be granted. Delete it and let the
			// caller retry.
			_, _ = s.remove(context.WithoutCancel(ctx), t)
			return nil, nil, 0, fmt.Errorf("%w: etcd: the key of an earlier attempt on %q is under a session that ended",
				driver.ErrUnavailable, req.Resource)
		}
	}
	return t, kvs, resp.Header.Revision, nil
}

// taken is the error of a request that b comes before.
func taken(resource string, b *mvccpb.KeyValue) error {
	return fmt.Errorf("%w: %q: a %s request queued first (revision %d)",
		driver.ErrTaken, resource, modeOf(b), b.CreateRevision)
}

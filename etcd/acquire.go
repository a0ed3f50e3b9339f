package etcd

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// Acquire makes one attempt, without waiting. When the resource has no
// queue it creates the request's key in the same transaction that finds
// the queue empty: one round trip, one write. Otherwise it reads the queue
// without creating anything, and returns driver.ErrTaken at once when a
// request in a conflicting mode is queued, so that a refused attempt
// touches nothing (it neither takes a place in the queue for a moment nor
// tells the holder it blocks someone); only a request compatible with the
// whole queue (PR among PR) then queues its key and checks again. A lease
// grant comes first when the session of the request's TTL is not open yet.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	t, kvs, rev, err := s.join(ctx, req, true)
	if err != nil {
		return driver.Grant{}, err
	}
	if t == nil { // others are queued, and nothing was created
		if b := blocker(kvs, rev+1, req.Mode); b != nil {
			return driver.Grant{}, taken(req.Resource, b)
		}
		if t, kvs, rev, err = s.enqueue(ctx, req); err != nil {
			return driver.Grant{}, err
		}
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
	return s.join(ctx, req, false)
}

// join is enqueue; with ifEmpty, it creates the key only if nobody is
// queued (the request's own key, from an attempt whose reply was lost,
// counts as nobody), and otherwise returns the queue and its revision with
// a nil ticket.
func (s *Store) join(ctx context.Context, req driver.Request, ifEmpty bool) (*ticket, []*mvccpb.KeyValue, int64, error) {
	ss, err := s.session(ctx, req.TTL)
	if err != nil {
		return nil, nil, 0, err
	}
	asked := time.Now()
	dir := s.dir(req.Resource)
	key := s.keyOf(ss, req.Resource, dir, req.Owner)
	list := listOp(dir)
	cctx, cancel := s.call(ctx)
	defer cancel()
	var cmp *pb.Compare
	then := []*pb.RequestOp{putOp(key, value(req), ss.id), list}
	if ifEmpty {
		// Nobody queued: no key under the directory, the request's own
		// included. After the put the queue is that key alone, which the
		// reply need not list: two reads fewer in etcd's apply.
		cmp = absent(dir, clientv3.GetPrefixRangeEnd(dir))
		then = then[:1]
	} else {
		cmp = absent(key, "")
	}
	txn := &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: then, Failure: []*pb.RequestOp{list}}
	resp, err := s.kv.txn(cctx, txn)
	if err != nil {
		// The transaction may have been applied: package dlm releases
		// the request with an empty grant (see Release).
		s.unsure(ss, req.Resource, req.Owner)
		s.unref(ss)
		return nil, nil, 0, s.fail(ctx, "create key", err)
	}
	var kvs []*mvccpb.KeyValue // the queue, unless the key was created alone
	if r := resp.Responses[len(resp.Responses)-1].GetResponseRange(); r != nil {
		kvs = r.Kvs
	}
	t := &ticket{key: key, resource: req.Resource, owner: req.Owner, rev: resp.Header.Revision, lease: ss.id, ss: ss, renewed: asked}
	if !resp.Succeeded {
		own := false
		for _, kv := range kvs {
			if string(kv.Key) == key {
				t.rev, t.lease, own = kv.CreateRevision, clientv3.LeaseID(kv.Lease), true
			}
		}
		if ifEmpty && !own {
			s.leaveSlot(ss, req.Resource, req.Owner, true) // nothing was created
			s.unref(ss)
			return nil, kvs, resp.Header.Revision, nil
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

package etcd

import (
	"context"
	"errors"
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
	if err := s.awaitCreates(ctx, req.Resource, req.Owner); err != nil {
		return nil, nil, 0, s.fail(ctx, "create key", err)
	}
	ss, err := s.session(ctx, req.TTL)
	if err != nil {
		return nil, nil, 0, err
	}
	asked := time.Now()
	dir := s.dir(req.Resource)
	key := s.keyOf(ss, req.Resource, dir, req.Owner)
	list := listOp(dir)
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
	resp, err := s.createTxn(ctx, ss, req, key, txn)
	switch {
	case errors.Is(err, errLeft):
		return nil, nil, 0, s.fail(ctx, "create key", ctx.Err()) // the store settles it
	case err != nil:
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

// errLeft is createTxn's error when its caller's context ended first.
var errLeft = errors.New("the caller left before the answer")

// A creation is a create transaction of one request (createTxn).
type creation struct {
	answered chan struct{} // closed once resp and err are set
	resp     *pb.TxnResponse
	err      error
	left     bool          // the caller left before the answer (under s.mu)
	settled  chan struct{} // closed once the store settled it, when left
	prev     *creation     // an earlier one of the same request, not settled yet
}

// createTxn runs txn, which creates the key of req under ss, within the
// request timeout, and waits for its answer or for ctx's end. When ctx ends first it returns errLeft, and the transaction runs on
// to its answer all the same: the store then deletes the request's key
// under ss and gives back the session's reference (settle), and until it has,
// a later call of the same request waits (awaitCreates). So an acquisition
// given up in flight leaves no key behind, even when the transaction is
// applied after the caller's release of its outcome looked for it.
func (s *Store) createTxn(ctx context.Context, ss *session, req driver.Request, key string, txn *pb.TxnRequest) (*pb.TxnResponse, error) {
	c := &creation{answered: make(chan struct{}), settled: make(chan struct{})}
	tctx, cancel := s.clock.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	s.settling.Add(1)
	go func() {
		defer s.settling.Done()
		defer cancel()
		c.resp, c.err = s.kv.txn(noDeadline{tctx}, txn)
		close(c.answered)
		s.mu.Lock()
		left := c.left
		s.mu.Unlock()
		if left {
			s.settle(ss, req, key, c)
		}
	}()
	select {
	case <-c.answered:
		return c.resp, c.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-c.answered: // answered meanwhile: the answer stands
		return c.resp, c.err
	default:
	}
	c.left = true
	r := request{req.Resource, req.Owner}
	c.prev = s.creating[r]
	s.creating[r] = c
	return nil, errLeft
}

// settle deletes the key of a create transaction c whose caller left, once
// it is answered: whether or not it was applied, the request's key under
// ss must not stay. A delete that fails leaves the key to the session's
// keep-alive loop (an orphan) and retires the request's slot, so that no
// later attempt reuses a key that is still to be deleted.
func (s *Store) settle(ss *session, req driver.Request, key string, c *creation) {
	if c.prev != nil {
		<-c.prev.settled
	}
	ctx, cancel := s.clock.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	t := &ticket{key: key, resource: req.Resource, owner: req.Owner, lease: ss.id, ss: ss}
	if _, err := s.remove(ctx, t); err != nil {
		s.leaveSlot(ss, req.Resource, req.Owner, false)
	}
	s.mu.Lock()
	r := request{req.Resource, req.Owner}
	if s.creating[r] == c {
		delete(s.creating, r)
	}
	s.mu.Unlock()
	close(c.settled)
}

// awaitCreates waits until the create transactions of the request of
// resource and owner whose callers left are settled, or ctx ends.
func (s *Store) awaitCreates(ctx context.Context, resource, owner string) error {
	s.mu.Lock()
	c := s.creating[request{resource, owner}]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c.settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

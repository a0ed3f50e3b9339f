package etcd

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// AcquireWait queues the request and blocks until no conflicting request is
// queued before it, or ctx ends; see the package documentation. When ctx
// ends first it deletes the request's key, on a context that outlives ctx
// (bounded by the request timeout; a delete that fails is retried at the
// session's keep-alives), and returns an error wrapping driver.ErrTaken and
// ctx.Err(). When the request's own key vanishes, or its session ends, while
// it waits, it returns driver.ErrUnavailable at once.
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	t, kvs, rev, err := s.enqueue(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	if err := s.wait(ctx, req, t, kvs, rev); err != nil {
		_, _ = s.remove(context.WithoutCancel(ctx), t)
		if ctx.Err() != nil {
			return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, ctx.Err())
		}
		return driver.Grant{}, err
	}
	// The last read of the queue stopped at t's key: the watch reads
	// what came behind it.
	return s.granted(req, t, nil, 0), nil
}

// wait blocks until no key created before t's conflicts with req's mode.
// kvs is the queue as read at revision rev. The session keeps t's lease
// alive meanwhile.
func (s *Store) wait(ctx context.Context, req driver.Request, t *ticket, kvs []*mvccpb.KeyValue, rev int64) error {
	for {
		if !t.queued(kvs) {
			return vanished(req.Resource)
		}
		b := blocker(kvs, t.rev, req.Mode)
		if b == nil {
			return nil
		}
		if err := s.await(ctx, req.Resource, t, b, rev); err != nil {
			return err
		}
		sent := time.Now()
		var err error
		if kvs, rev, err = s.queue(ctx, req.Resource, t.rev); err != nil {
			return err
		}
		t.renewed = sent // the key was in place then, under a live session
	}
}

// await returns nil when the predecessor's key pred, seen at revision rev,
// is deleted, or when its watch ends otherwise: the caller then reads the
// queue again. It returns an error when t's own key is deleted, when its
// session ends, or when ctx ends.
//
// Both watches start at etcd's current revision, so that etcd counts them
// as synced and sends a deletion at once; a watch that starts at an older
// revision waits for etcd's catch-up loop, up to 100 ms. When etcd created a
// watch past rev, one read of its key tells whether it was deleted in
// between.
func (s *Store) await(ctx context.Context, resource string, t *ticket, pred *mvccpb.KeyValue, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel() // ends both watches
	// clientv3's Watch returns once etcd has created the watch, however
	// long that takes: bound it.
	late := time.AfterFunc(s.timeout, cancel)
	predc := s.cli.Watch(wctx, string(pred.Key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	ownc := s.cli.Watch(wctx, t.key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	if !late.Stop() && ctx.Err() == nil {
		return fmt.Errorf("%w: etcd watch: not created within %s", driver.ErrUnavailable, s.timeout)
	}
	for {
		select {
		case wr, ok := <-predc:
			switch {
			case !ok || wr.Err() != nil || len(wr.Events) > 0:
				return nil
			case wr.Created && wr.Header.Revision > rev:
				if gone, err := s.gone(ctx, pred); err != nil || gone {
					return err
				}
			}
		case wr, ok := <-ownc:
			switch {
			case !ok || wr.Err() != nil:
				return nil
			case len(wr.Events) > 0:
				return vanished(resource)
			case wr.Created && wr.Header.Revision > rev:
				if gone, err := s.gone(ctx, t.kv()); err != nil || gone {
					return cmp.Or(err, vanished(resource))
				}
			}
		case <-t.ss.lost.Done():
			return fmt.Errorf("%w: etcd: the session of the waiting request for %q ended: %w",
				driver.ErrUnavailable, resource, t.ss.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// gone reports whether kv's key no longer exists as it was created.
func (s *Store) gone(ctx context.Context, kv *mvccpb.KeyValue) (bool, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, string(kv.Key))
	if err != nil {
		return false, s.fail(ctx, "read key", err)
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision, nil
}

// vanished is the error of a waiting request whose key or lease is gone:
// etcd dropped the request, which happens when its lease could not be kept
// alive (or was revoked by hand).
func vanished(resource string) error {
	return fmt.Errorf("%w: etcd: the waiting request for %q lost its key (lease expired or revoked)", driver.ErrUnavailable, resource)
}

package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseSeconds is the TTL of a request's lease: ttl rounded up to whole
// seconds, at least one. etcd may raise it to its own minimum.
func leaseSeconds(ttl time.Duration) int64 {
	n := int64(ttl / time.Second)
	if ttl%time.Second != 0 || n == 0 {
		n++
	}
	return n
}

// errLeaseGone means a request's lease no longer exists in etcd: it was
// revoked, or it expired.
var errLeaseGone = errors.New("etcd lease expired or revoked")

// grantLease asks etcd for the lease of one request.
func (s *Store) grantLease(ctx context.Context, ttl time.Duration) (*clientv3.LeaseGrantResponse, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Grant(cctx, leaseSeconds(ttl))
	if err != nil {
		return nil, s.fail(ctx, "grant lease", err)
	}
	return resp, nil
}

// keepAlive renews a lease once. It returns errLeaseGone when etcd no
// longer has the lease.
func (s *Store) keepAlive(ctx context.Context, id clientv3.LeaseID) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	_, err := s.cli.KeepAliveOnce(cctx, id)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return errLeaseGone
	default:
		return s.fail(ctx, "keep-alive", err)
	}
}

// drop revokes a lease, and so deletes the one key attached to it, on a
// context that outlives the caller's, bounded by the request timeout. It
// reports nothing: a lease that could not be revoked expires by itself.
func (s *Store) drop(ctx context.Context, id clientv3.LeaseID) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	_, _ = s.cli.Revoke(cctx, id)
}

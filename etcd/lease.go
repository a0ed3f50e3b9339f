package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseSeconds is the TTL of the lease of requests with the TTL ttl: ttl
// rounded up to whole seconds, at least one. etcd may raise it to its own
// minimum.
func leaseSeconds(ttl time.Duration) int64 {
	n := int64(ttl / time.Second)
	if ttl%time.Second != 0 || n == 0 {
		n++
	}
	return n
}

// errLeaseGone means a session's lease no longer exists in etcd: it was
// revoked, or it expired.
var errLeaseGone = errors.New("etcd lease expired or revoked")

// isLeaseGone reports whether err is etcd's answer for a lease it does not
// have.
func isLeaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// grantLease asks etcd for a lease of seconds.
func (s *Store) grantLease(ctx context.Context, seconds int64) (*clientv3.LeaseGrantResponse, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Grant(cctx, seconds)
	if err != nil {
		return nil, s.fail(ctx, "grant lease", err)
	}
	return resp, nil
}

// revoke revokes a lease, and so deletes every key under it, on a context
// that outlives the caller's, bounded by the request timeout. It reports
// nothing: a lease that could not be revoked expires by itself.
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	_, _ = s.cli.Revoke(cctx, id)
}

package redlock

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Relabeler = (*Store)(nil)

// Relabel sets the metadata of the lock to metadata, in place and keeping
// its TTL, on every node where req.Owner holds it, and returns as soon as
// a quorum has done so; the other nodes' calls go on within the per-node
// timeout. It returns driver.ErrNotHeld when more than N - quorum nodes
// answered that the owner does not hold the lock there (another owner, or
// missing: Relabel never sets a lock again), and ErrUnavailable when too
// few nodes answered to tell.
//
// Each relabel carries a version, larger than the lease's previous one,
// which each node records with the metadata in the resource's label key
// (kept for the fence retention, like the token counter): Inspect and List
// show the metadata of the newest version among the nodes they read, so
// that a reader sees the new metadata once Relabel returns even if some of
// the nodes it reads missed the relabel (any quorum of readers shares a
// node with the quorum that relabelled). A node that restarted without
// persistence, or was flushed, forgets it, as it forgets the lock.
func (s *Store) Relabel(ctx context.Context, req driver.Request, g driver.Grant, metadata string) error {
	if s.bad != nil {
		return s.bad
	}
	k := s.keys(req)
	version := redislua.LabelVersion(leaseOf(g.Handle).nextLabel())
	r := s.fanout(ctx, s.nodeTimeout(req.TTL), func(ctx context.Context, n *node) (answer, uint64, error) {
		return s.relabelOn(ctx, n, k, req.Owner, metadata, version)
	}, nil)
	t := tally{nodes: len(s.nodes)}
	for t.votes < t.nodes {
		t.add(<-r.votes)
		if t.yes >= s.quorum {
			r.keep() // the other nodes' relabels
			return nil
		}
	}
	switch {
	case t.no+t.absent > t.nodes-s.quorum:
		return fmt.Errorf("%w: %q is not held on a quorum: relabelled on %d of %d nodes, held by another owner on %d, not locked on %d%s",
			driver.ErrNotHeld, req.Resource, t.yes, t.nodes, t.no, t.absent, t.silence())
	case ctx.Err() != nil:
		return fmt.Errorf("redlock relabel: %w", ctx.Err())
	default:
		return s.unavailable("relabel", req.Resource, &t)
	}
}

// relabelOn runs the relabel script on one node.
func (s *Store) relabelOn(ctx context.Context, n *node, k redislua.Keys, owner, metadata, version string) (answer, uint64, error) {
	return ownerChecked(s.eval(ctx, n, false, redislua.RedlockRelabel, []string{k.Lock, k.Label},
		owner, metadata, version, s.retention.Milliseconds()))
}

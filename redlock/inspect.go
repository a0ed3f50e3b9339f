package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Inspector = (*Store)(nil)

// Inspect returns the resource named exactly resource as it stands on the
// nodes: it reads the resource on every node at once, each read atomic (one
// script call), bounded as List's are by the per-node timeout given with
// WithNodeTimeout, or one second without it. A node that fails or times out
// counts as not holding it; when fewer than a quorum of nodes answer,
// Inspect returns driver.ErrUnavailable joined with one *NodeError per
// silent node.
//
// The resource has a holder when one owner holds it on a quorum of the
// nodes (of all N); it is shown as List shows it: its owner id, mode EX,
// the newest metadata it set (see Relabel), the largest token counter of
// the nodes that hold it, the time until fewer than a quorum hold it, and
// Since, the clock of the node with that counter at the grant, read from
// the token (as the redis store reads it: later than the grant if that
// clock stepped back or ran behind another node's, zero when the token is
// not a past reading of it). It shows no waiters: the wait lists are per
// node (see the package documentation).
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if s.bad != nil {
		return driver.ResourceInfo{}, s.bad
	}
	if resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: empty resource name", driver.ErrInvalid)
	}
	each := s.timeout
	if each <= 0 {
		each = listNodeTimeout
	}
	nodes := slices.Clone(s.nodes)
	reads := make([]redislua.Resource, len(nodes))
	answered, errs := s.onNodes(ctx, nodes, nil, each, func(ctx context.Context, i int, n *node) error {
		r, err := redislua.ReadOne(ctx, n.rdb, redislua.Plain, s.prefix, resource, each)
		reads[i] = r
		return err
	})
	switch {
	case ctx.Err() != nil:
		return driver.ResourceInfo{}, fmt.Errorf("redlock inspect: %w", ctx.Err())
	case len(answered) < s.quorum:
		return driver.ResourceInfo{}, fmt.Errorf("%w: redlock inspect %q: %d of %d nodes answered, a quorum is %d: %w",
			driver.ErrUnavailable, resource, len(answered), len(s.nodes), s.quorum, errors.Join(errs...))
	}
	var on []redislua.Resource
	for i, n := range nodes {
		if slices.Contains(answered, n) {
			on = append(on, reads[i])
		}
	}
	info := driver.ResourceInfo{Resource: resource}
	if h, ok := s.quorumHolder(on); ok {
		info.Holders = []driver.HolderInfo{h}
	}
	return info, nil
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Lister = (*Store)(nil)

// listNodeTimeout bounds each call of a listing to one node when
// WithNodeTimeout was not given (the automatic per-node timeout follows a
// lock's TTL, which a listing does not have).
const listNodeTimeout = time.Second

// minListBatch is the fewest resources read in one pipeline of a listing.
const minListBatch = 16

// List returns the resources whose name starts with prefix that are held
// on a quorum of nodes, sorted by name, at most limit of them.
//
// It asks every node at once, as the redis store lists one server: each
// node walks its whole keyspace with SCAN and a MATCH pattern (never KEYS)
// for the lock keys of the matching resources; then the union of the names
// is sorted and the first ones are read on every node, pipelined, until
// limit resources held on a quorum are found. A listing therefore costs one
// pass over each node's keyspace whatever the limit. Each call to a node
// is bounded by the per-node timeout given with WithNodeTimeout, or by one
// second without it. A node that fails or times out counts as not holding
// anything; when fewer than a quorum of nodes answer, List returns
// driver.ErrUnavailable joined with one *NodeError per silent node.
//
// A resource is shown with a holder when one owner holds its key on a
// quorum of the nodes (of all N, not of those that answered); keys held by
// an owner on fewer nodes (an attempt that failed or is under way, a lock
// expiring node by node) are not shown, and a resource with no such holder
// is left out. The holder shows its owner id, mode EX, metadata, token and
// TTL. A grant's token is the largest token counter among the quorum that
// granted it, which the nodes do not record: List shows the largest counter
// among all the nodes that hold the lock, which is the grant's token when
// exactly a quorum holds it and otherwise may be above it. The TTL is the
// time until fewer than a quorum of nodes hold the lock, by the nodes' own
// clocks: the smallest TTL of the quorum with the longest TTLs. The
// metadata is the newest the holder set (see Relabel). Since is read from
// the token as Inspect does. It shows no waiters: the wait lists are per
// node (see the package documentation).
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	each := s.timeout
	if each <= 0 {
		each = listNodeTimeout
	}
	live := slices.Clone(s.nodes)
	var errs []error

	scans := make([][]string, len(live))
	live, errs = s.onNodes(ctx, live, errs, each, func(ctx context.Context, i int, n *node) error {
		names, err := redislua.ScanNames(ctx, n.rdb, s.prefix, prefix, each)
		scans[i] = names
		return err
	})
	if err := s.listFailed(ctx, prefix, live, errs); err != nil {
		return nil, err
	}
	var names []string
	for _, ns := range scans {
		names = append(names, ns...)
	}
	slices.Sort(names)
	names = slices.Compact(names)

	var out []driver.ResourceInfo
	for len(names) > 0 && len(out) < limit {
		batch := names[:min(len(names), max(limit-len(out), minListBatch))]
		names = names[len(batch):]
		reads := make([][]redislua.Resource, len(live))
		var answered []*node
		answered, errs = s.onNodes(ctx, live, errs, each, func(ctx context.Context, i int, n *node) error {
			rs, err := redislua.ReadResources(ctx, n.rdb, redislua.Plain, s.prefix, batch, each)
			reads[i] = rs
			return err
		})
		if err := s.listFailed(ctx, prefix, answered, errs); err != nil {
			return nil, err
		}
		for j, name := range batch {
			var on []redislua.Resource
			for i, n := range live {
				if slices.Contains(answered, n) {
					on = append(on, reads[i][j])
				}
			}
			if h, ok := s.quorumHolder(on); ok {
				out = append(out, driver.ResourceInfo{Resource: name, Holders: []driver.HolderInfo{h}})
				if len(out) == limit {
					break
				}
			}
		}
		live = answered
	}
	return out, nil
}

// onNodes runs f on every node of nodes at once and returns the nodes
// whose call succeeded, and errs with a *NodeError added for each other
// node. f gets the node's index in nodes, and bounds each of its calls by
// each.
func (s *Store) onNodes(ctx context.Context, nodes []*node, errs []error, each time.Duration,
	f func(ctx context.Context, i int, n *node) error,
) ([]*node, []error) {
	results := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			err := f(ctx, i, n)
			var nerr net.Error
			if err != nil && ctx.Err() == nil &&
				(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout()) {
				err = fmt.Errorf("no answer within the node timeout of %s", each)
			}
			results[i] = err
		})
	}
	wg.Wait()
	var ok []*node
	for i, n := range nodes {
		if results[i] != nil {
			errs = append(errs, &NodeError{Index: n.index, Addr: n.addr, Err: results[i]})
			continue
		}
		ok = append(ok, n)
	}
	return ok, errs
}

// listFailed returns the error of a listing that cannot go on: the
// caller's context ended, or fewer than a quorum of nodes answered.
func (s *Store) listFailed(ctx context.Context, prefix string, answered []*node, errs []error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("redlock list: %w", ctx.Err())
	case len(answered) < s.quorum:
		return fmt.Errorf("%w: redlock list %q: %d of %d nodes answered, a quorum is %d: %w",
			driver.ErrUnavailable, prefix, len(answered), len(s.nodes), s.quorum, errors.Join(errs...))
	}
	return nil
}

// quorumHolder returns the owner that holds the resource on a quorum of
// the nodes whose reads are rs, if one does. Its metadata is that of the
// node with the newest relabel (the highest label version; the metadata of
// the acquisition where none was recorded), and its token and Since those
// of the node with the largest token counter.
func (s *Store) quorumHolder(rs []redislua.Resource) (driver.HolderInfo, bool) {
	type held struct {
		ttls    []time.Duration
		token   uint64
		since   time.Time
		version uint64
		meta    string
	}
	byOwner := make(map[string]*held)
	for _, r := range rs {
		if r.Owner == "" {
			continue
		}
		h := byOwner[r.Owner]
		if h == nil {
			h = &held{version: r.Version, meta: r.Metadata}
			byOwner[r.Owner] = h
		}
		h.ttls = append(h.ttls, r.TTL)
		if r.Token > h.token {
			h.token, h.since = r.Token, r.Since
		}
		if r.Version > h.version {
			h.version, h.meta = r.Version, r.Metadata
		}
	}
	for owner, h := range byOwner {
		if len(h.ttls) < s.quorum {
			continue
		}
		// The lock is held on a quorum until the quorum-th longest TTL
		// runs out.
		slices.Sort(h.ttls)
		return driver.HolderInfo{
			Owner: owner, Mode: driver.EX, Token: h.token, Since: h.since,
			TTL: h.ttls[len(h.ttls)-s.quorum], Metadata: h.meta,
		}, true
	}
	return driver.HolderInfo{}, false
}

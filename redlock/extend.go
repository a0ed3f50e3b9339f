package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// Extend resets the lock's TTL on every node where req.Owner holds it, and
// sets it again where it is missing. It returns as soon as a quorum (not
// counting the nodes where it was missing) has extended it with validity
// left. Otherwise it waits for every node's answer, at most the per-node
// timeout: when the answers show that the owner cannot hold a quorum, it
// releases the owner's keys on every node and returns ErrNotHeld.
func (s *Store) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	if s.bad != nil {
		return s.bad
	}
	k := s.keys(req)
	timeout := s.nodeTimeout(req.TTL)
	start := time.Now()
	r := s.fanout(ctx, timeout, func(ctx context.Context, n *node) (answer, uint64, error) {
		return s.extendOn(ctx, n, k, req)
	}, nil)
	h := leaseOf(g.Handle)
	if h != nil {
		h.track(r)
	}
	t := tally{nodes: len(s.nodes)}
	for t.votes < t.nodes {
		t.add(<-r.votes)
		if t.yes >= s.quorum {
			elapsed := time.Since(start)
			r.keep() // the other nodes' extends, and locks set again
			if req.TTL-elapsed-s.drift(req.TTL) > 0 {
				return nil
			}
			return fmt.Errorf("%w: redlock extend %q: a quorum extended after %s, leaving no validity of the TTL %s",
				driver.ErrUnavailable, req.Resource, elapsed.Round(time.Microsecond), req.TTL)
		}
	}
	switch {
	case t.no+t.absent > t.nodes-s.quorum:
		// The lease is lost and dlm will not release it: free what is
		// left of it now rather than at the end of its TTL.
		s.releaseAll(context.WithoutCancel(ctx), k, req.Owner, g, timeout)
		return fmt.Errorf("%w: %q is not held on a quorum: extended on %d of %d nodes, held by another owner on %d, missing on %d%s",
			driver.ErrNotHeld, req.Resource, t.yes, t.nodes, t.no, t.absent, t.silence())
	case ctx.Err() != nil:
		return fmt.Errorf("redlock extend: %w", ctx.Err())
	default:
		return s.unavailable("extend", req.Resource, &t)
	}
}

// extendOn runs the extend script on one node.
func (s *Store) extendOn(ctx context.Context, n *node, k redislua.Keys, req driver.Request) (answer, uint64, error) {
	res, err := s.eval(ctx, n, true, redislua.RedlockExtend, []string{k.Lock},
		req.Owner, req.TTL.Milliseconds(), req.Metadata)
	if err != nil {
		return silent, 0, err
	}
	switch res {
	case int64(1):
		return yes, 0, nil
	case int64(2):
		return absent, 0, nil
	case int64(0):
		return no, 0, nil
	}
	return silent, 0, fmt.Errorf("unexpected reply %v", res)
}

package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// Acquire makes one attempt on every node at once and returns as soon as a
// quorum has granted (with validity left) or can no longer grant. A failed
// attempt is released on every node before Acquire returns. The token is
// the largest counter of the granting quorum. A node grants only when
// nobody waits there (see AcquireWait), so a new request never overtakes
// the queue.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	return s.attempt(ctx, req, s.keys(req), nil)
}

// attempt makes one attempt for req. With w set it is an attempt of a
// waiter: the nodes that do not grant queue it, a failed attempt keeps its
// place where it granted, and a successful one takes it out of the wait
// list of the nodes that did not grant.
func (s *Store) attempt(ctx context.Context, req driver.Request, k redislua.Keys, w *waiter) (driver.Grant, error) {
	start := time.Now()
	timeout := s.nodeTimeout(req.TTL)
	keys, args := s.acquireArgs(k, req, w)
	r := s.fanout(ctx, timeout,
		func(ctx context.Context, n *node) (answer, uint64, error) {
			a, tok, clock, err := s.acquireOn(ctx, n, keys, args)
			if w != nil && clock > 0 {
				w.answered(n.index, start, clock)
			}
			return a, tok, err
		},
		func(ctx context.Context, n *node, failed bool, a answer) {
			switch {
			case failed && a == no:
				// The node answered that it did not grant: nothing to undo,
				// and a waiter is queued there.
			case failed:
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				ukeys, uargs := s.releaseArgs(k, req.Owner, 0, w)
				_, clock, err := released(s.eval(ctx, n, false, redislua.RedlockRelease, ukeys, uargs...))
				if w != nil {
					w.undone(n.index, clock, err)
				}
			case w != nil && a != yes:
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				s.leaveOn(ctx, n, k, req.Owner, false)
			}
		},
	)
	h := &lease{}
	h.track(r)
	t := tally{nodes: len(s.nodes)}
	var late time.Duration // when a quorum granted with no validity left
	for t.votes < t.nodes {
		t.add(<-r.votes)
		if t.yes >= s.quorum {
			elapsed := time.Since(start)
			if req.TTL-elapsed-s.drift(req.TTL) > 0 {
				r.keep()
				r.decide(false)
				return driver.Grant{Token: t.token, Handle: h}, nil
			}
			late = elapsed
			break
		}
		if t.yes+t.pending() < s.quorum {
			break
		}
	}
	r.decide(true)
	t.collect(r)
	switch {
	case late > 0:
		return driver.Grant{}, fmt.Errorf("%w: redlock acquire %q: a quorum granted after %s, leaving no validity of the TTL %s",
			driver.ErrUnavailable, req.Resource, late.Round(time.Microsecond), req.TTL)
	case t.no >= s.quorum:
		return driver.Grant{}, s.taken(req.Resource, &t)
	case ctx.Err() != nil:
		return driver.Grant{}, fmt.Errorf("redlock acquire: %w", ctx.Err())
	case len(t.errs) > t.nodes-s.quorum:
		return driver.Grant{}, s.unavailable("acquire", req.Resource, &t)
	default:
		// Enough nodes answered to decide, and some said taken: a split
		// vote, or contention with a tolerable number of nodes down.
		return driver.Grant{}, s.taken(req.Resource, &t)
	}
}

func (s *Store) taken(resource string, t *tally) error {
	return fmt.Errorf("%w: %q is held by another owner on %d of %d nodes, granted on %d%s",
		driver.ErrTaken, resource, t.no, t.nodes, t.yes, t.silence())
}

// acquireArgs returns the keys and arguments of the acquire script for
// req, for a waiter when w is set.
func (s *Store) acquireArgs(k redislua.Keys, req driver.Request, w *waiter) ([]string, []any) {
	waiting, ticket := "0", "0"
	if w != nil {
		waiting, ticket = "1", w.ticket
	}
	return []string{k.Lock}, []any{req.Owner, req.TTL.Milliseconds(), req.Metadata,
		s.retention.Milliseconds(), waiting, ticket, s.liveness().Milliseconds()}
}

// acquireOn runs the acquire script on one node with the keys and
// arguments of acquireArgs. clock is the node's clock in microseconds when
// it ran the script, for a waiter's call (0 otherwise).
func (s *Store) acquireOn(ctx context.Context, n *node, keys []string, args []any) (a answer, token, clock uint64, err error) {
	res, err := s.eval(ctx, n, true, redislua.RedlockAcquire, keys, args...)
	if err != nil {
		return silent, 0, 0, err
	}
	if _, ok := res.(string); ok { // the short way's grant: the token alone
		tok, err := replyNumber(res, "token")
		if err != nil {
			return silent, 0, 0, err
		}
		return yes, tok, 0, nil
	}
	reply, _ := res.([]any)
	if len(reply) == 3 {
		if clock, err = replyNumber(reply[2], "clock"); err != nil {
			return silent, 0, 0, err
		}
	}
	switch {
	case len(reply) >= 2 && reply[0] == int64(1):
		tok, err := replyNumber(reply[1], "token")
		if err != nil {
			return silent, 0, 0, err
		}
		return yes, tok, clock, nil
	case len(reply) >= 2 && reply[0] == int64(0):
		return no, 0, clock, nil
	}
	return silent, 0, 0, fmt.Errorf("unexpected reply %v", res)
}

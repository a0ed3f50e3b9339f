package redlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// Release frees the lock on every node where req.Owner holds it, and raises
// each node's token counter to the grant's token. Each node's release is
// sent once the grant's calls still on their way to that node have
// answered, and Release returns as soon as the answers decide, at most
// twice the per-node timeout: nil when a quorum released the lock;
// ErrNotHeld when more than N - quorum nodes answered that the owner did
// not hold it there (it expired, or another owner holds it); otherwise,
// when too few nodes answered to tell, ErrUnavailable. The releases on the
// other nodes go on without the caller, each within twice the per-node
// timeout; but when a node woke a waiter, Release waits for every node, as
// the waiter is about to ask them all.
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	if s.bad != nil {
		return s.bad
	}
	t := s.releaseAll(ctx, s.keys(req), req.Owner, g, s.nodeTimeout(req.TTL))
	switch {
	case t.yes >= s.quorum:
		return nil
	case t.no+t.absent > t.nodes-s.quorum:
		return fmt.Errorf("%w: %q was not held on a quorum: released on %d of %d nodes, held by another owner on %d, not locked on %d%s",
			driver.ErrNotHeld, req.Resource, t.yes, t.nodes, t.no, t.absent, t.silence())
	case ctx.Err() != nil:
		return fmt.Errorf("redlock release: %w", ctx.Err())
	default:
		return s.unavailable("release", req.Resource, t)
	}
}

// releaseAll releases owner's lock on every node, each once the grant's
// calls still on their way to it have answered, and returns as soon as the
// answers decide: a quorum released, or too many nodes said the owner did
// not hold the lock there, or every node has answered. The other nodes'
// releases go on without the caller, each within twice the timeout. When a
// node woke a waiter, it waits for every node instead: the woken waiter's
// attempt then finds the lock free on every node that answers, and the
// releaser, which often asks again at once, does not race it for the
// cores.
func (s *Store) releaseAll(ctx context.Context, k redislua.Keys, owner string, g driver.Grant, timeout time.Duration) *tally {
	var wait func(context.Context, *node)
	if h := leaseOf(g.Handle); h != nil {
		wait = h.settle
	}
	keys, args := s.releaseArgs(k, owner, g.Token, nil)
	r := s.fanoutAfter(ctx, timeout, wait, func(ctx context.Context, n *node) (answer, uint64, error) {
		return s.releaseOn(ctx, n, keys, args)
	}, nil)
	t := &tally{nodes: len(s.nodes)}
	for t.votes < t.nodes && (t.woke || t.yes < s.quorum) && t.no+t.absent <= t.nodes-s.quorum {
		t.add(<-r.votes)
	}
	r.keep() // the other nodes' releases
	return t
}

// releaseArgs returns the keys and arguments of the release script. A
// zero token raises no counter. With w set (the undo of a waiter's failed
// attempt) the owner keeps its place in the node's wait list.
func (s *Store) releaseArgs(k redislua.Keys, owner string, token uint64, w *waiter) ([]string, []any) {
	requeue, ticket, request := "0", "0", ""
	if w != nil {
		requeue, ticket, request = "1", w.ticket, w.request
	}
	return []string{k.Lock}, []any{owner, strconv.FormatUint(token, 10), s.retention.Milliseconds(),
		s.liveness().Milliseconds(), requeue, ticket, request, s.handsOver()}
}

// handsOver is the release script's argument that makes a node hand the
// lock to the head of its wait list: "1", unless a restart guard is set (a
// node does not know its own age inside the release script, so it could
// grant while the guard bars it from voting).
func (s *Store) handsOver() string {
	if s.guard > 0 {
		return "0"
	}
	return "1"
}

// releaseOn runs the release script on one node with the keys and
// arguments of releaseArgs.
func (s *Store) releaseOn(ctx context.Context, n *node, keys []string, args []any) (answer, uint64, error) {
	a, _, err := released(s.eval(ctx, n, false, redislua.RedlockRelease, keys, args...))
	return a, 0, err
}

// released reads the reply of the release script: yesWoke when the node
// woke a waiter or handed it the lock, and the node's clock in
// microseconds when the reply carries it (the undo of a waiter's attempt).
func released(res any, err error) (answer, uint64, error) {
	var clock uint64
	if reply, ok := res.([]any); ok && len(reply) == 2 && err == nil {
		if clock, err = replyNumber(reply[1], "clock"); err != nil {
			return silent, 0, err
		}
		res = reply[0]
	}
	if err == nil && (res == int64(2) || res == int64(3)) {
		return yesWoke, clock, nil
	}
	a, _, err := ownerChecked(res, err)
	return a, clock, err
}

// replyNumber reads a decimal number from a script's reply: a token, or a
// node's clock in microseconds (what names it in the error).
func replyNumber(v any, what string) (uint64, error) {
	str, _ := v.(string)
	n, err := strconv.ParseUint(str, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q", what, str)
	}
	return n, nil
}

// ownerChecked reads the reply of an owner-checked script (release,
// relabel): 1 done, 0 held by another owner, -1 not held at all.
func ownerChecked(res any, err error) (answer, uint64, error) {
	if err != nil {
		return silent, 0, err
	}
	switch res {
	case int64(1):
		return yes, 0, nil
	case int64(0):
		return no, 0, nil
	case int64(-1):
		return absent, 0, nil
	}
	return silent, 0, fmt.Errorf("unexpected reply %v", res)
}

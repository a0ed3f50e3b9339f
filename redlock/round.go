package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// answer is what one node said to one call.
type answer int8

const (
	silent  answer = iota // no answer; the vote's err says why
	yes                   // granted, extended or released
	no                    // held by another owner
	absent                // not held by anyone (extend: set again)
	yesWoke               // released, and the node woke a waiter
)

// vote is one node's answer to one call.
type vote struct {
	answer answer
	token  uint64 // the node's token counter, for a granted acquire
	err    error  // a *NodeError when silent
}

// ask makes one call to one node under ctx, which carries the per-node
// timeout.
type ask func(ctx context.Context, n *node) (answer, uint64, error)

// undo cleans up after ask on one node once the round is decided: failed
// tells whether the round failed, a is the node's answer. ctx does not end
// with the caller's: undo bounds its own calls by the per-node timeout.
type undo func(ctx context.Context, n *node, failed bool, a answer)

// round is one call fanned out to every node. Each node's vote is sent on a
// channel buffered for all of them, so that a worker never blocks and the
// caller may stop reading at any time.
type round struct {
	votes   chan vote
	done    []chan struct{} // by node index: closed when that node has answered or timed out
	allIn   chan struct{}   // closed when every node has answered or timed out
	decided chan struct{}   // closed by decide
	failed  bool            // set before decided is closed
	workers sync.WaitGroup
	detach  func() bool // stops the caller's context from ending the calls
}

// fanout starts ask on every node at once, all under one per-node deadline.
// The caller's context ends the calls until keep is called, so that a call
// that returned with a quorum lets the others reach their nodes.
//
// With undo set, each worker, after its vote, waits for decide and runs
// undo on its node, so that a node's cleanup always follows its own
// answer; decide must then be called. Without undo the
// workers end after their vote. Either way they end by themselves within
// the timeout (twice the timeout with undo).
//
// A sequential store asks the nodes one after another in one worker, each
// with its own timeout.
func (s *Store) fanout(ctx context.Context, timeout time.Duration, a ask, u undo) *round {
	return s.fanoutAfter(ctx, timeout, nil, a, u)
}

// fanoutAfter is fanout, with each node's call made once wait (if not nil)
// has returned for that node: its per-node deadline starts then. wait is
// given a context that ends with the caller's until keep is called; it
// must return by itself within the per-node timeout.
func (s *Store) fanoutAfter(ctx context.Context, timeout time.Duration, wait func(context.Context, *node), a ask, u undo) *round {
	r := &round{
		votes:   make(chan vote, len(s.nodes)),
		done:    make([]chan struct{}, len(s.nodes)),
		allIn:   make(chan struct{}),
		decided: make(chan struct{}),
	}
	for i := range r.done {
		r.done[i] = make(chan struct{})
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.detach = context.AfterFunc(ctx, cancel)
	finish := func() {
		r.detach()
		cancel()
		close(r.allIn)
	}
	if s.sequential {
		r.workers.Add(1)
		go func() {
			defer r.workers.Done()
			answers := make([]answer, 0, len(s.nodes))
			for _, n := range s.nodes {
				if wait != nil {
					wait(base, n)
				}
				nctx, ncancel := s.clock.WithTimeout(base, timeout)
				v := call(ctx, nctx, timeout, n, a)
				close(r.done[n.index])
				answers = append(answers, v.answer)
				r.votes <- v
				ncancel()
			}
			finish()
			for i, n := range s.nodes {
				r.cleanUp(ctx, n, answers[i], u)
			}
		}()
		return r
	}
	// One deadline for every node; a node that waits first gets its own,
	// from the end of its wait.
	var shared context.Context
	sharedCancel := context.CancelFunc(func() {})
	if wait == nil {
		shared, sharedCancel = s.clock.WithTimeout(base, timeout)
	}
	var left atomic.Int32
	left.Store(int32(len(s.nodes)))
	answered := func(n *node) {
		close(r.done[n.index])
		if left.Add(-1) == 0 {
			sharedCancel()
			finish()
		}
	}
	r.workers.Add(len(s.nodes))
	for _, n := range s.nodes {
		n.run(func() {
			defer r.workers.Done()
			nctx, ncancel := shared, context.CancelFunc(func() {})
			if wait != nil {
				wait(base, n)
				nctx, ncancel = s.clock.WithTimeout(base, timeout)
			}
			v := call(ctx, nctx, timeout, n, a)
			ncancel()
			answered(n)
			r.votes <- v
			r.cleanUp(ctx, n, v.answer, u)
		})
	}
	return r
}

// keep lets the calls still under way finish, whatever becomes of the
// caller's context.
func (r *round) keep() { r.detach() }

// cleanUp waits for decide, if u is set, and runs u on n, even if the
// caller's context has ended.
func (r *round) cleanUp(ctx context.Context, n *node, a answer, u undo) {
	if u == nil {
		return
	}
	<-r.decided
	u(context.WithoutCancel(ctx), n, r.failed, a)
}

// decide ends a round started with an undo. When it failed, decide returns
// once every node has voted and been cleaned up.
func (r *round) decide(failed bool) {
	r.failed = failed
	close(r.decided)
	if failed {
		r.workers.Wait()
	}
}

// call runs a on n and names the node in its error. ctx is the caller's,
// nctx the same with the per-node deadline.
func call(ctx, nctx context.Context, timeout time.Duration, n *node, a ask) vote {
	ans, tok, err := a(nctx, n)
	if err == nil {
		return vote{answer: ans, token: tok}
	}
	if deadline, _ := nctx.Deadline(); ctx.Err() == nil && !time.Now().Before(deadline) {
		err = fmt.Errorf("no answer within the node timeout of %s", timeout)
	}
	return vote{err: &NodeError{Index: n.index, Addr: n.addr, Err: err}}
}

// tally counts the votes of one round.
type tally struct {
	nodes, votes    int
	yes, no, absent int
	woke            bool    // a node woke a waiter (a yesWoke vote, counted as yes)
	token           uint64  // the largest counter among the yes votes
	errs            []error // of the silent nodes
}

func (t *tally) add(v vote) {
	t.votes++
	switch v.answer {
	case yes:
		t.yes++
		t.token = max(t.token, v.token)
	case yesWoke:
		t.yes++
		t.woke = true
	case no:
		t.no++
	case absent:
		t.absent++
	default:
		t.errs = append(t.errs, v.err)
	}
}

// pending is the number of nodes that have not voted yet.
func (t *tally) pending() int { return t.nodes - t.votes }

// answered is the number of nodes that gave an answer.
func (t *tally) answered() int { return t.votes - len(t.errs) }

// collect reads the votes still to come from r.
func (t *tally) collect(r *round) {
	for t.votes < t.nodes {
		t.add(<-r.votes)
	}
}

// unavailable is the error of a call that fewer than a quorum of nodes
// answered, joining the nodes' errors.
func (s *Store) unavailable(op, resource string, t *tally) error {
	return fmt.Errorf("%w: redlock %s %q: %d of %d nodes answered, a quorum is %d: %w",
		driver.ErrUnavailable, op, resource, t.answered(), t.nodes, s.quorum, errors.Join(t.errs...))
}

// silence describes the silent nodes in a message that must not wrap their
// errors (contention is not an outage).
func (t *tally) silence() string {
	if len(t.errs) == 0 {
		return ""
	}
	msgs := make([]string, len(t.errs))
	for i, err := range t.errs {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("; %d gave no answer: %s", len(t.errs), strings.Join(msgs, "; "))
}

package redlock

import (
	"context"
	"sync"
	"time"
)

// lease is the store's state for one grant (driver.Grant.Handle): the calls
// of its acquire and extends that may still be on their way to slow nodes
// after the call returned with a quorum. A release waits for them, node by
// node and at most the per-node timeout, so that it reaches each node after
// them and no late acquire or extend sets the lock again behind it.
type lease struct {
	mu      sync.Mutex
	pending []*round // rounds whose nodes may still answer
	label   uint64   // the version of the last relabel
}

// track adds a round whose nodes may still answer.
func (l *lease) track(r *round) {
	l.mu.Lock()
	defer l.mu.Unlock()
	live := l.pending[:0]
	for _, p := range l.pending {
		select {
		case <-p.allIn:
		default:
			live = append(live, p)
		}
	}
	l.pending = append(live, r)
}

// settle waits until every tracked round has the answer of node n, or ctx
// ends.
func (l *lease) settle(ctx context.Context, n *node) {
	l.mu.Lock()
	pending := l.pending
	l.mu.Unlock()
	for _, r := range pending {
		select {
		case <-r.done[n.index]:
		case <-ctx.Done():
			return
		}
	}
}

// nextLabel returns the version of a new relabel of the lease: larger than
// the lease's last one, and than the client's clock in microseconds, which
// orders the relabels of leases that share an owner (an acquisition whose
// reply was lost, retried). It stays below 10^16 (year 2286), the width of
// the label key's version.
func (l *lease) nextLabel() uint64 {
	now := uint64(time.Now().UnixMicro())
	if l == nil {
		return now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.label = max(l.label+1, now)
	return l.label
}

// leaseOf returns the state of a grant made by this store, or nil (for the
// empty grant of a cleanup).
func leaseOf(g any) *lease {
	l, _ := g.(*lease)
	return l
}

package dlm

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// renew extends the lease every TTL/3 until ctx ends (release or loss) or
// the maximum hold is reached. A failed renewal is retried sooner; if the
// store stays unreachable past the deadline, the deadline timer ends the
// lease as lost.
func (l *Lease) renew(ctx context.Context) {
	defer close(l.renewerDone)
	interval := l.req.TTL / 3
	next := interval
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if l.maxHold > 0 && time.Now().Add(l.req.TTL).After(l.acquired.Add(l.maxHold)) {
			l.mu.Lock()
			l.holdOver = true
			l.mu.Unlock()
			l.c.log.Info("dlm: maximum hold reached, renewal stopped", "store", l.c.store, "resource", l.req.Resource)
			return
		}
		ectx, cancel := context.WithDeadline(ctx, l.Deadline())
		err := l.Extend(ectx)
		cancel()
		l.c.metrics.Renewed(l.c.store, err == nil)
		switch {
		case err == nil:
			next = interval
		case ctx.Err() != nil, errors.Is(err, ErrLost), errors.Is(err, ErrNotHeld):
			return
		default:
			// The store did not answer: try again soon, jittered, while
			// the lease is still valid.
			next = interval/8 + rand.N(interval/8+1)
			l.c.log.Warn("dlm: renewal failed", "store", l.c.store, "resource", l.req.Resource, "err", err)
		}
	}
}

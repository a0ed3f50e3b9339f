package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Waiter = (*Store)(nil)

// AcquireWait queues for the lock on every node and blocks until it is
// granted on a quorum or ctx ends. Each attempt asks every node at once,
// as Acquire does, and puts the caller in the wait list of each node that
// does not grant, with a ticket chosen when the call began (the client's
// clock in microseconds), the same on every node and kept across attempts.
// A node grants only to the head of its live wait list. The release of the
// lock on a node hands it to that node's head, or wakes the head, through
// the head's own wake-up list, which the waiter pops on every node: a
// waiter handed the lock on a quorum of nodes, with validity left, holds
// it without asking again. Otherwise it attempts again on a wake-up, or
// when handovers from some nodes were not joined by a quorum within the
// per-node timeout, or every queue refresh interval, which keeps its place
// alive. When ctx ends it leaves every node's wait list, freeing the lock
// where a release had handed it over, and returns an error wrapping
// driver.ErrTaken and ctx.Err().
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	k := s.keys(req)
	w := s.newWaiter(req)
	l := s.newListeners(k.Wake)
	defer l.stop()
	for {
		start := time.Now()
		g, err := s.attempt(ctx, req, k, w)
		if err == nil {
			g.Start = start // the TTL runs from this attempt's grant
			return g, nil
		}
		switch {
		case ctx.Err() != nil:
			s.leaveAll(ctx, k, req.Owner)
			return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, ctx.Err())
		case !errors.Is(err, driver.ErrTaken):
			s.leaveAll(ctx, k, req.Owner)
			return driver.Grant{}, err
		}
		l.start(s.nodes)
		g, ok, err := s.await(ctx, req, w, l)
		switch {
		case err != nil:
			s.leaveAll(ctx, k, req.Owner)
			return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, err)
		case ok:
			return g, nil
		}
	}
}

// await waits, between two attempts of a waiter, for a quorum of nodes to
// hand it the lock, and returns the grant when they did with validity
// left. It returns without one, for the waiter to attempt again, on a
// wake-up, when handovers do not reach a quorum within the per-node
// timeout of the first or reach it with no validity left, and after the
// queue refresh interval; and with ctx's error when ctx ends.
func (s *Store) await(ctx context.Context, req driver.Request, w *waiter, l *listeners) (driver.Grant, bool, error) {
	refresh := time.NewTimer(s.refresh)
	defer refresh.Stop()
	var joined <-chan time.Time // the bound on handovers reaching a quorum
	for {
		select {
		case n := <-l.notices:
			if n.handover == nil {
				return driver.Grant{}, false, nil
			}
			w.handedOver(n.node, *n.handover)
			g, got, late := w.grant(s.quorum, req.TTL, s.drift(req.TTL), s.driftFactor)
			switch {
			case got:
				return g, true, nil
			case late:
				return driver.Grant{}, false, nil
			case joined == nil:
				joined = time.After(s.nodeTimeout(req.TTL))
			}
		case <-joined:
			return driver.Grant{}, false, nil
		case <-refresh.C:
			return driver.Grant{}, false, nil
		case <-ctx.Done():
			return driver.Grant{}, false, ctx.Err()
		}
	}
}

// liveness is how long a node keeps a waiter that stopped refreshing its
// place.
func (s *Store) liveness() time.Duration { return 4 * s.refresh }

// leaveOn takes owner out of one node's wait list. With free set it also
// frees the lock there if a release handed it to owner.
func (s *Store) leaveOn(ctx context.Context, n *node, k redislua.Keys, owner string, free bool) {
	tickets, live, requests := redislua.RedlockQueueKeys(k)
	freeArg := "0"
	if free {
		freeArg = "1"
	}
	_ = redislua.RedlockLeave.Run(ctx, n.rdb, []string{k.Lock, tickets, live, k.Wake, requests, k.Fence},
		owner, k.WakeBase, s.liveness().Milliseconds(), s.retention.Milliseconds(), s.handsOver(), freeArg).Err()
}

// leaveAll takes owner out of every node's wait list, and frees the lock
// where a release handed it to owner, on a context that outlives the
// caller's, each call bounded by the per-node timeout of a listing. A node
// that cannot be reached drops the place when it lapses, and a lock handed
// over there when its TTL runs out.
func (s *Store) leaveAll(ctx context.Context, k redislua.Keys, owner string) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, listNodeTimeout)
			defer cancel()
			s.leaveOn(nctx, n, k, owner, true)
		})
	}
	wg.Wait()
}

// wakePop bounds each blocking pop of a listener, and so how long one
// outlives its waiter on a node that was never told to stop.
const wakePop = time.Second

// listeners pop one waiter's wake-up list on every node, one goroutine per
// node, and send each wake-up and handover on notices. After one a
// listener pauses until the waiter's attempt has failed (start resumes
// it), so that a wake-up followed by a grant costs no further pop. A
// listener ends when it pops "stop" (pushed by a node that grants to the
// waiter while the listener is still popping, by leave, and by stop), when
// its node fails, or once stop was called: at once if paused, else when
// its current pop returns.
type listeners struct {
	key     string
	keep    time.Duration // how long a "stop" pushed by stop is kept
	notices chan notice   // buffered for one per node
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	on      map[*node]chan struct{} // per running listener: resumes it when paused
	popping map[*node]bool          // the listeners in a blocking pop
}

func (s *Store) newListeners(key string) *listeners {
	ctx, cancel := context.WithCancel(context.Background())
	return &listeners{key: key, keep: s.liveness(), notices: make(chan notice, len(s.nodes)), ctx: ctx, cancel: cancel,
		on: make(map[*node]chan struct{}, len(s.nodes)), popping: make(map[*node]bool, len(s.nodes))}
}

// start starts a listener on each node of nodes that has none, and
// resumes those paused after a wake-up.
func (l *listeners) start(nodes []*node) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return
	}
	for _, n := range nodes {
		if resume, ok := l.on[n]; ok {
			select {
			case resume <- struct{}{}:
			default:
			}
			continue
		}
		resume := make(chan struct{}, 1)
		l.on[n] = resume
		go l.listen(n, resume)
	}
}

// stop makes every listener end. go-redis does not interrupt a blocking
// command when its context is cancelled, so a listener in a pop would keep
// it, and its connection, until the pop times out. A waiter granted by
// handovers leaves a pop on each node that has not handed over yet; the
// handover ends it as it arrives, but a node that lags leaves it blocking,
// and under contention such pops filled the connection pools and stalled
// every call (one run in twelve of the contended benchmark fell from about
// 680 to 300-400 acquisitions/s). So stop, after stopGrace, ends each pop
// still blocking by pushing "stop" to the wake-up list it pops, each push
// bounded by wakePop.
func (l *listeners) stop() {
	l.cancel()
	time.AfterFunc(stopGrace, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for n, popping := range l.popping {
			if popping {
				go l.unblock(n)
			}
		}
	})
}

// stopGrace is how long stop leaves the pops under way to end by
// themselves.
const stopGrace = 20 * time.Millisecond

// unblock pushes "stop" to the wake-up list on n.
func (l *listeners) unblock(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), wakePop)
	defer cancel()
	_, _ = n.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		p.RPush(ctx, l.key, "stop")
		p.PExpire(ctx, l.key, l.keep)
		return nil
	})
}

// pop makes one blocking pop on n, marked as under way for stop.
func (l *listeners) pop(n *node) ([]string, error) {
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		return nil, l.ctx.Err()
	}
	l.popping[n] = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.popping[n] = false
		l.mu.Unlock()
	}()
	return n.rdb.BLPop(l.ctx, wakePop, l.key).Result()
}

func (l *listeners) listen(n *node, resume chan struct{}) {
	defer func() {
		l.mu.Lock()
		delete(l.on, n)
		delete(l.popping, n)
		l.mu.Unlock()
	}()
	for l.ctx.Err() == nil {
		v, err := l.pop(n)
		switch {
		case err == nil && len(v) == 2 && v[1] == "stop":
			return
		case err == nil && len(v) == 2:
			select {
			case <-resume: // a resume from before this wake-up
			default:
			}
			select {
			case l.notices <- notice{node: n.index, handover: parseHandover(v[1])}:
			case <-l.ctx.Done():
				return
			}
			select {
			case <-resume:
			case <-l.ctx.Done():
				return
			}
		case errors.Is(err, goredis.Nil):
			// Timed out; pop again.
		default:
			// The node fails: the waiter's refresh timer carries on.
			return
		}
	}
}

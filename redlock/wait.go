package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Waiter = (*Store)(nil)

// waiter is one AcquireWait call's place in the nodes' wait lists.
type waiter struct {
	ticket string // the same on every node: its order among the waiters
}

// AcquireWait queues for the lock on every node and blocks until it is
// granted on a quorum or ctx ends. Each attempt asks every node at once,
// as Acquire does, and puts the caller in the wait list of each node that
// does not grant, with a ticket chosen when the call began (the client's
// clock in microseconds), the same on every node and kept across attempts.
// A node grants only to the head of its live wait list. The release of the
// lock on a node wakes that node's head through its own wake-up list,
// which the waiter pops on every node; it also attempts again every queue
// refresh interval, which keeps its place alive. When ctx ends it leaves
// every node's wait list and returns an error wrapping driver.ErrTaken and
// ctx.Err().
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	k := s.keys(req)
	w := &waiter{ticket: strconv.FormatInt(time.Now().UnixMicro(), 10)}
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
		t := time.NewTimer(s.refresh)
		select {
		case <-l.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.leaveAll(ctx, k, req.Owner)
			return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, ctx.Err())
		}
		t.Stop()
	}
}

// liveness is how long a node keeps a waiter that stopped refreshing its
// place.
func (s *Store) liveness() time.Duration { return 4 * s.refresh }

// leaveOn takes owner out of one node's wait list.
func (s *Store) leaveOn(ctx context.Context, n *node, k redislua.Keys, owner string) {
	tickets, live := redislua.RedlockQueueKeys(k)
	_ = redislua.RedlockLeave.Run(ctx, n.rdb, []string{k.Lock, tickets, live, k.Wake},
		owner, k.WakeBase, s.liveness().Milliseconds()).Err()
}

// leaveAll takes owner out of every node's wait list, on a context that
// outlives the caller's, each call bounded by the per-node timeout of a
// listing. A node that cannot be reached drops the place when it lapses.
func (s *Store) leaveAll(ctx context.Context, k redislua.Keys, owner string) {
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, listNodeTimeout)
			defer cancel()
			s.leaveOn(nctx, n, k, owner)
		})
	}
	wg.Wait()
}

// wakePop bounds each blocking pop of a listener, and so how long one
// outlives its waiter on a node that was never told to stop.
const wakePop = time.Second

// listeners pop one waiter's wake-up list on every node, one goroutine per
// node, and signal each wake-up on wake. After a wake-up a listener pauses
// until the waiter's attempt has failed (start resumes it), so that a
// wake-up followed by a grant costs no further pop. A listener ends when it
// pops "stop" (pushed by a node that grants to the waiter while the
// listener is still popping, and by leave), when its node fails, or once
// stop was called: at once if paused, else when its current pop returns.
type listeners struct {
	key    string
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	on     map[*node]chan struct{} // per running listener: resumes it when paused
}

func (s *Store) newListeners(key string) *listeners {
	ctx, cancel := context.WithCancel(context.Background())
	return &listeners{key: key, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
		on: make(map[*node]chan struct{}, len(s.nodes))}
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

// stop makes every listener end.
func (l *listeners) stop() { l.cancel() }

func (l *listeners) listen(n *node, resume chan struct{}) {
	defer func() {
		l.mu.Lock()
		delete(l.on, n)
		l.mu.Unlock()
	}()
	for l.ctx.Err() == nil {
		v, err := n.rdb.BLPop(l.ctx, wakePop, l.key).Result()
		switch {
		case err == nil && len(v) == 2 && v[1] == "stop":
			return
		case err == nil:
			select {
			case <-resume: // a resume from before this wake-up
			default:
			}
			select {
			case l.wake <- struct{}{}:
			default:
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

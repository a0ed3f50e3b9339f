package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redlock"
)

// queued returns how many waiters other than except each node has in
// resource's wait list (-1 for a node that does not answer).
func (e *env) queued(resource, except string) []int64 {
	e.t.Helper()
	out := make([]int64, len(e.raw))
	for i, rdb := range e.raw {
		ctx := context.Background()
		key := lockKey(resource) + ":tickets"
		n, err := rdb.ZCard(ctx, key).Result()
		if err != nil {
			n = -1
		} else if except != "" && rdb.ZScore(ctx, key, except).Err() == nil {
			n--
		}
		out[i] = n
	}
	return out
}

// holder returns the owner and metadata of the owner that holds resource
// on a quorum of the nodes, or "" when none does.
func (e *env) holder(resource string) (owner, metadata string) {
	byValue := map[string]int{}
	for _, v := range e.holders(resource) {
		if len(v) >= 32 {
			byValue[v]++
		}
	}
	for v, n := range byValue {
		if n >= nodes/2+1 {
			return v[:32], v[32:]
		}
	}
	return "", ""
}

// everyNodeQueues reports whether every node has exactly n waiters other
// than except queued for resource.
func (e *env) everyNodeQueues(resource, except string, n int64) bool {
	for _, q := range e.queued(resource, except) {
		if q != n {
			return false
		}
	}
	return true
}

// TestGrantsFollowTheQueue has four clients take the lock three times
// each. A holder releases only once the lock is on every node and every
// other client that still wants it is queued on every node: the grants
// must then go round in the order of arrival, and a releaser that asks
// again goes behind those already waiting instead of taking the lock back.
func TestGrantsFollowTheQueue(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const rounds = 3
	names := []string{"A", "B", "C", "D"}

	var (
		mu    sync.Mutex
		order []string
		left  = map[string]int{}
	)
	for _, n := range names {
		left[n] = rounds
	}
	// wanting counts the clients other than self with rounds left.
	wanting := func(self string) int64 {
		mu.Lock()
		defer mu.Unlock()
		n := int64(0)
		for c, l := range left {
			if c != self && l > 0 {
				n++
			}
		}
		return n
	}
	run := func(c *dlm.Client, me string, first *dlm.Lease) error {
		for i := range rounds {
			l := first
			if i > 0 || l == nil {
				var err error
				l, err = c.Acquire(ctx, name, dlm.WithMetadata(me), dlm.WithTTL(time.Minute), dlm.WithWait(time.Minute))
				if err != nil {
					return err
				}
			}
			mu.Lock()
			order = append(order, me)
			left[me]--
			mu.Unlock()
			storetest.Await(t, 30*time.Second, me+"'s grant on a quorum and the others queued", func() bool {
				owner, meta := e.holder(name)
				return meta == me && e.everyNodeQueues(name, owner, wanting(me))
			})
			if err := l.Release(ctx); err != nil {
				return err
			}
		}
		return nil
	}

	clients := make(map[string]*dlm.Client)
	for _, n := range names {
		clients[n], _ = e.client()
	}
	first, err := clients["A"].Acquire(ctx, name, dlm.WithMetadata("A"), dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for i, n := range names[1:] {
		wg.Go(func() { errs <- run(clients[n], n, nil) })
		// Queue the waiters in a known order.
		storetest.Await(t, 30*time.Second, n+" queued on every node", func() bool {
			return e.everyNodeQueues(name, "", int64(i+1))
		})
	}
	wg.Go(func() { errs <- run(clients["A"], "A", first) })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := slices.Repeat(names, rounds)
	if !slices.Equal(order, want) {
		t.Fatalf("grants in the order %v, want %v", order, want)
	}
	storetest.Await(t, 10*time.Second, "the wait lists to empty", func() bool { return e.everyNodeQueues(name, "", 0) })
}

// TestQueueSurvivesEmptyRestart restarts a node without persistence while
// two waiters queue behind a holder: the node forgets the lock and its wait
// list. A newcomer is granted there (the node knows of nobody) but that is
// a minority, so it gets nothing; the waiters put themselves back in the
// node's wait list at their next refresh, and are granted in their order
// once the holder releases, each on a quorum.
func TestQueueSurvivesEmptyRestart(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder, _ := e.client()
	h, err := holder.Acquire(ctx, name, dlm.WithMetadata("H"), dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	e.awaitEveryNode(name)

	type grant struct {
		who   string
		nodes int // nodes holding the lock for it at the grant
	}
	grants := make(chan grant, 2)
	var wg sync.WaitGroup
	for i, me := range []string{"W1", "W2"} {
		c, _ := e.client(redlock.WithQueueRefresh(50 * time.Millisecond))
		wg.Go(func() {
			l, err := c.Acquire(ctx, name, dlm.WithMetadata(me), dlm.WithTTL(time.Minute), dlm.WithWait(time.Minute))
			if err != nil {
				t.Error(err)
				grants <- grant{who: me}
				return
			}
			n := 0
			for _, v := range e.holders(name) {
				if strings.HasSuffix(v, me) && len(v) == 32+len(me) {
					n++
				}
			}
			grants <- grant{who: me, nodes: n}
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		storetest.Await(t, 30*time.Second, me+" queued on every node", func() bool {
			return e.everyNodeQueues(name, "", int64(i+1))
		})
	}

	e.srvs[0].Kill()
	e.srvs[0].Restart()
	if q := e.queued(name, "")[0]; q != 0 {
		t.Fatalf("the restarted node still has %d waiters", q)
	}

	// A newcomer wins the empty node only: no grant on a minority.
	s := e.store()
	req := request(name, 10*time.Second)
	if _, err := s.Acquire(ctx, req); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("acquire by a newcomer after the restart = %v, want ErrTaken", err)
	}
	for i, v := range e.holders(name) {
		if strings.HasPrefix(v, req.Owner) {
			t.Fatalf("the newcomer's failed attempt left its lock on node %d", i)
		}
	}

	// The waiters queue again on the restarted node, in their order.
	storetest.Await(t, 30*time.Second, "the waiters queued again on the restarted node", func() bool {
		return e.everyNodeQueues(name, "", 2)
	})
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	var got []grant
	for g := range grants {
		got = append(got, g)
	}
	if len(got) != 2 || got[0].who != "W1" || got[1].who != "W2" {
		t.Fatalf("grants %v, want W1 then W2", got)
	}
	for _, g := range got {
		if g.nodes < nodes/2+1 {
			t.Fatalf("%s was granted holding %d of %d nodes", g.who, g.nodes, nodes)
		}
	}
}

// TestQueueWithNodesDownAndPaused queues two waiters with one node down and
// another paused: they queue on the three that answer, and are granted in
// their order once the holder releases, each on a quorum.
func TestQueueWithNodesDownAndPaused(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const timeout = 300 * time.Millisecond
	holder, _ := e.client(redlock.WithNodeTimeout(timeout))
	h, err := holder.Acquire(ctx, name, dlm.WithMetadata("H"), dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	e.awaitEveryNode(name)
	e.srvs[1].Kill()
	e.pause(3, 5*time.Second)
	live := []int{0, 2, 4}
	queuedOnLive := func(n int64) bool {
		for _, i := range live {
			if q, err := e.raw[i].ZCard(ctx, lockKey(name)+":tickets").Result(); err != nil || q != n {
				return false
			}
		}
		return true
	}

	grants := make(chan string, 2)
	var wg sync.WaitGroup
	for i, me := range []string{"W1", "W2"} {
		c, _ := e.client(redlock.WithNodeTimeout(timeout), redlock.WithQueueRefresh(50*time.Millisecond))
		wg.Go(func() {
			l, err := c.Acquire(ctx, name, dlm.WithMetadata(me), dlm.WithTTL(time.Minute), dlm.WithWait(time.Minute))
			if err != nil {
				t.Error(err)
				grants <- ""
				return
			}
			n := 0
			for _, v := range e.holders(name, live...) {
				if len(v) == 32+len(me) && strings.HasSuffix(v, me) {
					n++
				}
			}
			if n < nodes/2+1 {
				t.Errorf("%s granted holding %d of the %d live nodes", me, n, len(live))
			}
			grants <- me
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		})
		storetest.Await(t, 30*time.Second, me+" queued on the live nodes", func() bool { return queuedOnLive(int64(i + 1)) })
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	var got []string
	for g := range grants {
		got = append(got, g)
	}
	if !slices.Equal(got, []string{"W1", "W2"}) {
		t.Fatalf("grants %v, want W1 then W2", got)
	}
}

// TestWaitEndsWithContext ends a waiter's context: AcquireWait returns an
// error wrapping ErrTaken and the context's, and leaves no place behind on
// any node.
func TestWaitEndsWithContext(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	if _, err := s.Acquire(ctx, request(name, time.Minute)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, request(name, time.Minute))
		done <- err
	}()
	storetest.Await(t, 30*time.Second, "the waiter queued on every node", func() bool { return e.everyNodeQueues(name, "", 1) })
	cancel()
	err := <-done
	if !errors.Is(err, driver.ErrTaken) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait after its context ended = %v, want ErrTaken and context.Canceled", err)
	}
	if !e.everyNodeQueues(name, "", 0) {
		t.Fatalf("the waiter is still queued: %v", e.queued(name, ""))
	}
}

// TestReleaseBeforeAWaiterWaitsForEveryNode: a release that wakes a waiter
// waits for every node's answer (the waiter is about to ask them all),
// where one that nobody waits behind returns at a quorum (TestSlowNode).
// With a node paused, the release returns only once the pause has ended
// and the node has answered.
func TestReleaseBeforeAWaiterWaitsForEveryNode(t *testing.T) {
	e := newEnv(t)
	// The pause is short of the node timeout, so that the paused node
	// answers rather than times out.
	const timeout, pause = 5 * time.Second, 500 * time.Millisecond
	s := e.store(redlock.WithNodeTimeout(timeout))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	a := request(name, time.Minute)
	g, err := s.Acquire(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	e.awaitEveryNode(name)
	b := request(name, time.Minute)
	got := make(chan error, 1)
	go func() {
		gb, err := s.AcquireWait(ctx, b)
		if err == nil {
			err = s.Release(ctx, b, gb)
		}
		got <- err
	}()
	storetest.Await(t, 10*time.Second, "the waiter queued on every node", func() bool {
		return !slices.Contains(e.queued(name, ""), 0)
	})
	paused := time.Now()
	e.pause(4, pause)
	if err := s.Release(ctx, a, g); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(paused.Add(pause)) {
		t.Fatalf("release returned %s after node 4 was paused for %s: it did not wait for the node", now.Sub(paused), pause)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

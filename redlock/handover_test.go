package redlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redlock"
)

// TestReleaseHandsTheLockOver: a release with a waiter queued on every
// node hands the lock to it on every node, with the waiter's TTL and
// metadata and a larger token, and the waiter holds it without asking the
// nodes again: each node runs one script, the release. The grant's Start
// is no later than the handover (the release's return), so that its
// validity never outlasts the nodes' TTL.
func TestReleaseHandsTheLockOver(t *testing.T) {
	e := newEnv(t)
	// A refresh far beyond the test: the waiter attempts only when woken.
	s := e.store(redlock.WithQueueRefresh(time.Hour))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	b := request(name, time.Minute)
	b.Metadata = "B"
	asked := time.Now()
	a, ga, got := e.heldAndAwaited(ctx, s, name, b)

	testenv.ResetRedisStats(t, e.raw...)
	before := time.Now()
	if err := s.Release(ctx, a, ga); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// A release that handed the lock over returns once every node has.
	for i, v := range e.holders(name) {
		if v != b.Owner+"B" {
			t.Fatalf("node %d holds %q after the release, want the waiter's %q", i, v, b.Owner+"B")
		}
		if ttl := e.raw[i].PTTL(ctx, lockKey(name)).Val(); ttl < 50*time.Second {
			t.Fatalf("node %d set the waiter's lock with a TTL of %s, want its own minute", i, ttl)
		}
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.g.Token <= ga.Token {
		t.Fatalf("the waiter's token %d is not above the releaser's %d", r.g.Token, ga.Token)
	}
	if r.g.Start.After(after) {
		t.Fatalf("the grant starts %s after the handover", r.g.Start.Sub(after))
	}
	// The dating allows for a clock 1% fast over the wait.
	if r.g.Start.Before(before.Add(-before.Sub(asked) / 50)) {
		t.Fatalf("the grant starts %s before the release", before.Sub(r.g.Start))
	}
	if st := testenv.RedisScriptStats(t, e.raw...); st.Scripts != nodes {
		t.Fatalf("the nodes ran %v scripts, want %d (the release on each): the waiter asked again", st.Scripts, nodes)
	}
	if !e.everyNodeQueues(name, "", 0) {
		t.Fatalf("the wait lists are not empty: %v", e.queued(name, ""))
	}
	if err := s.Release(ctx, b, r.g); err != nil {
		t.Fatal(err)
	}
	if n := e.count(name, ""); n != nodes {
		t.Fatalf("%d of %d nodes are free after the waiter's release", n, nodes)
	}
}

// TestHandoverToAMinorityIsNotAGrant: the nodes disagree on the head of
// their wait lists (here a waiter that died, queued ahead on three nodes
// only), so a release hands the lock to the live waiter on two nodes and
// to the dead one on three. The live waiter must not count two handovers
// as a grant: it attempts again, undoes the two, and is granted only once
// the dead waiter's lock has run out on the three, holding a quorum.
func TestHandoverToAMinorityIsNotAGrant(t *testing.T) {
	e := newEnv(t)
	s := e.store(redlock.WithQueueRefresh(50 * time.Millisecond))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	b := request(name, time.Minute)
	b.Metadata = "B"
	a, ga, got := e.heldAndAwaited(ctx, s, name, b)

	// The dead waiter: first in line on nodes 2-4, and asking for a lock
	// of 2 s.
	const deadTTL = 2 * time.Second
	dead := strings.Repeat("d", 32)
	for _, i := range []int{2, 3, 4} {
		e.queueBehind(i, name, dead, 1, strconv.FormatInt(deadTTL.Milliseconds(), 10)+" D")
	}
	released := time.Now()
	if err := s.Release(ctx, a, ga); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	granted := time.Now()
	if n := e.count(name, b.Owner+"B"); n < nodes/2+1 {
		t.Fatalf("the waiter was granted holding %d of %d nodes (after %s; the dead waiter holds %d)",
			n, nodes, granted.Sub(released), e.count(name, dead+"D"))
	}
	if granted.Sub(released) < deadTTL/2 {
		t.Fatalf("granted %s after the release, before the dead waiter's lock ran out", granted.Sub(released))
	}
	if err := s.Release(ctx, b, r.g); err != nil {
		t.Fatal(err)
	}
}

// TestGivingUpFreesAHandedLock: a waiter whose context ends may have been
// handed the lock on some nodes, too few for a grant (here two, where a
// dead waiter is first in line on the other three). Leaving frees the lock
// on those two and hands it to the next waiter there, as a release would,
// instead of leaving it held until its TTL.
func TestGivingUpFreesAHandedLock(t *testing.T) {
	e := newEnv(t)
	// Neither a refresh nor the bound on handovers reaching a quorum comes
	// within the test: the waiter waits until its context ends.
	s := e.store(redlock.WithQueueRefresh(time.Hour), redlock.WithNodeTimeout(time.Minute))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	w := request(name, time.Minute)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, ga, got := e.heldAndAwaited(wctx, s, name, w)

	// A dead waiter first in line on nodes 2-4, and the next waiter behind
	// the live one on nodes 0 and 1.
	dead, next := strings.Repeat("d", 32), strings.Repeat("n", 32)
	key := lockKey(name)
	for _, i := range []int{2, 3, 4} {
		e.queueBehind(i, name, dead, 1, "60000 D")
	}
	for _, i := range []int{0, 1} {
		e.queueBehind(i, name, next, 1e17, "60000 N")
	}
	if err := s.Release(ctx, a, ga); err != nil {
		t.Fatal(err)
	}
	if n := e.count(name, w.Owner); n != 2 {
		t.Fatalf("the waiter was handed the lock on %d nodes, want 2: %v", n, e.holders(name))
	}
	cancel()
	if err := (<-got).err; !errors.Is(err, driver.ErrTaken) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait after its context ended = %v, want ErrTaken and context.Canceled", err)
	}
	for _, i := range []int{0, 1} {
		if v := e.holders(name)[i]; v != next+"N" {
			t.Fatalf("node %d holds %q after the waiter gave up, want the next waiter's %q", i, v, next+"N")
		}
		msgs := e.raw[i].LRange(ctx, key+":wake:"+next, 0, -1).Val()
		if len(msgs) != 1 || !strings.Contains(msgs[0], " ") {
			t.Fatalf("node %d told the next waiter %q, want one handover", i, msgs)
		}
	}
}

// TestReleaseLeavesTheWaitLists: a waiter granted by handovers from a
// quorum is still queued on the nodes whose holder has not released yet
// (a release returns at a quorum and reaches the others later). When it
// releases before those late releases arrive, it must leave those nodes'
// wait lists, or each late release hands it the lock it no longer wants,
// held there for its whole TTL: minority leftovers that later deny a
// quorum to others.
func TestReleaseLeavesTheWaitLists(t *testing.T) {
	e := newEnv(t)
	s := e.store(redlock.WithQueueRefresh(time.Hour))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	b := request(name, time.Minute)
	a, _, got := e.heldAndAwaited(ctx, s, name, b)

	// The holder's release reaches nodes 0-2 now and nodes 3-4 later.
	releaseOn := func(i int) {
		t.Helper()
		args := []any{a.Owner, "0", (7 * 24 * time.Hour).Milliseconds(), time.Minute.Milliseconds(), "0", "0", "", "1"}
		if err := redislua.RedlockRelease.Run(ctx, e.raw[i], []string{lockKey(name)}, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		releaseOn(i)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := s.Release(ctx, b, r.g); err != nil {
		t.Fatal(err)
	}
	releaseOn(3)
	releaseOn(4)
	if n := e.count(name, ""); n != nodes {
		t.Fatalf("%d of %d nodes are free after both releases: %v", n, nodes, e.holders(name))
	}
	if !e.everyNodeQueues(name, "", 0) {
		t.Fatalf("the wait lists are not empty: %v", e.queued(name, ""))
	}
}

// waited is the outcome of an AcquireWait.
type waited struct {
	g   driver.Grant
	err error
}

// heldAndAwaited has s take resource for a minute, on every node, and
// starts b waiting for it under ctx once it is; it returns the holder's
// request and grant, and the waiter's outcome to come, once the waiter is
// queued on every node.
func (e *env) heldAndAwaited(ctx context.Context, s *redlock.Store, resource string, b driver.Request) (driver.Request, driver.Grant, <-chan waited) {
	e.t.Helper()
	a := request(resource, time.Minute)
	ga, err := s.Acquire(ctx, a)
	if err != nil {
		e.t.Fatal(err)
	}
	e.awaitEveryNode(resource)
	got := make(chan waited, 1)
	go func() {
		g, err := s.AcquireWait(ctx, b)
		got <- waited{g, err}
	}()
	storetest.Await(e.t, 30*time.Second, "the waiter queued on every node", func() bool { return e.everyNodeQueues(resource, "", 1) })
	return a, ga, got
}

// queueBehind puts owner in resource's wait list on node i, as a waiter
// with ticket, alive for an hour, asking for request ("ttl metadata"),
// which nobody pops: a waiter that died.
func (e *env) queueBehind(i int, resource, owner string, ticket float64, request string) {
	e.t.Helper()
	ctx, key, rdb := context.Background(), lockKey(resource), e.raw[i]
	for _, err := range []error{
		rdb.ZAdd(ctx, key+":tickets", goredis.Z{Score: ticket, Member: owner}).Err(),
		rdb.ZAdd(ctx, key+":alive", goredis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: owner}).Err(),
		rdb.HSet(ctx, key+":requests", owner, request).Err(),
	} {
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestMutualExclusionWhileNodesPause has workers take one lock in turn,
// each grant after the first handed over or attempted for, while one node
// after another stops answering for longer than the node timeout: votes
// and undos go unanswered or reach their node late, handovers arrive late
// or never. No two holders may ever be inside at once, and no update may
// be lost. A release may then fail to tell (ErrUnavailable: too few nodes
// answered that they released), which the workers accept: the lock
// expires with its TTL.
func TestMutualExclusionWhileNodesPause(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var clients []*dlm.Client
	for range 3 {
		c, _ := e.client(redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithQueueRefresh(50*time.Millisecond))
		clients = append(clients, c)
	}
	// A node pauses from the start and another every 100 ms, until the
	// workers are done: however fast they are, they run into a pause.
	stop := make(chan struct{})
	pauses := make(chan int, 1)
	first := make(chan struct{})
	go func() {
		n := 0
		defer func() { pauses <- n }()
		for i := 0; ; i = (i + 2) % nodes {
			if err := e.raw[i].Do(context.Background(), "CLIENT", "PAUSE", 150, "ALL").Err(); err != nil {
				t.Errorf("pause node %d: %v", i, err)
				close(first)
				return
			}
			if n++; n == 1 {
				close(first)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	<-first
	const workers, each = 12, 6
	var counter, inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for done := 0; done < each; {
				l, err := c.Acquire(ctx, name, dlm.WithTTL(2*time.Second), dlm.WithWait(time.Minute))
				switch {
				case errors.Is(err, dlm.ErrUnavailable):
					continue
				case err != nil:
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				inside.Add(-1)
				done++
				if err := l.Release(ctx); err != nil && !errors.Is(err, dlm.ErrUnavailable) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if n := <-pauses; n == 0 {
		t.Fatal("no node was paused during the run")
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d grants found another holder inside", n)
	}
	if got := counter.Load(); got != workers*each {
		t.Fatalf("counter = %d, want %d: lost updates, two holders at once", got, workers*each)
	}
}

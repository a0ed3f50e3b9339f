package dlmserver_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// A cluster loses its leader to kill -9: the client, given every address
// (followers first, so it is also redirected), resumes its session on the
// new leader and keeps its lock; the waiter is granted after the release,
// with a greater token.
func TestClusterFailover(t *testing.T) {
	// 3 nodes lose their leader; 5 nodes lose their leader and a follower.
	for _, n := range []int{3, 5} {
		t.Run(strconv.Itoa(n)+" nodes", func(t *testing.T) { failover(t, n) })
	}
}

// raftTimeout replaces testenv's quick 100ms Raft timeouts in these tests:
// on a loaded machine, which holds a node back for that long now and then,
// those bring elections all the time, and no fail-over ends.
var raftTimeout = []string{"-raft-timeout", "500ms"}

func failover(t *testing.T, nodes int) {
	c := testenv.StartCluster(t, bin, nodes, raftTimeout...)
	leader := c.Leader(t, 20*time.Second)
	var addrs []string
	for _, n := range c.Nodes {
		if n != leader {
			addrs = append(addrs, n.Addr())
		}
	}
	addrs = append(addrs, leader.Addr())
	list := strings.Join(addrs, ",")
	ctx := storetest.Context(t)

	// The fail-over (an election, a reconnect) must fit in the session TTL
	// as the client counts it, however loaded the machine.
	sa := dial(t, list, dlmserver.WithSessionTTL(30*time.Second))
	sb := dial(t, list, dlmserver.WithSessionTTL(30*time.Second))
	a, b := dlm.New(sa), dlm.New(sb)
	held, err := a.Acquire(ctx, "failover", dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Contention, not an outage: a try-lock that found its store
	// reconnecting (a loaded machine's leadership blip) is asked again.
	storetest.Await(t, 10*time.Second, "an answer to b's try-lock", func() bool {
		_, err = b.Acquire(ctx, "failover", dlm.WithWait(0))
		return !errors.Is(err, dlm.ErrUnavailable)
	})
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("b while a holds: %v", err)
	}
	granted := make(chan *dlm.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "failover")
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	lister := newLister(t, leader.Addr())
	storetest.Await(t, 10*time.Second, "b queued", func() bool { return lister.waiting("failover") == 1 })

	leader.Kill()
	if nodes == 5 {
		for _, n := range c.Nodes {
			if n != leader {
				n.Kill() // a second node: a majority of 3 remains
				break
			}
		}
	}
	next := c.Leader(t, 20*time.Second)
	if next == leader {
		t.Fatal("the killed node is still the leader")
	}
	// a's session lives on the new leader, with its lock.
	lister = newLister(t, next.Addr())
	want := strconv.FormatUint(sa.Session(), 10)
	storetest.Await(t, 10*time.Second, "a's lock on the new leader", func() bool {
		h := lister.resource("failover").GetHolders()
		return len(h) == 1 && strconv.FormatUint(h[0].GetSession(), 10) == want
	})
	select {
	case <-held.Lost():
		t.Fatalf("a's lease was lost across the fail-over: %v", held.Err())
	case l := <-granted:
		t.Fatalf("b was granted while a held the lock (token %d)", l.Token())
	default:
	}
	// A watch goes to the new leader, where the store's session is, and
	// sees the hand-over.
	var watch <-chan struct{}
	storetest.Await(t, 10*time.Second, "a watch on the new leader", func() bool {
		var err error
		watch, err = sa.Watch(ctx, "failover")
		return err == nil
	})
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release on the new leader: %v", err)
	}
	select {
	case _, ok := <-watch:
		if !ok {
			t.Fatal("the watch ended instead of signalling the release")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not signal the release")
	}
	select {
	case l := <-granted:
		if l == nil {
			t.Fatal("b's acquisition failed")
		}
		if l.Token() <= held.Token() {
			t.Fatalf("token went from %d to %d across the fail-over", held.Token(), l.Token())
		}
		l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("b was not granted after a released")
	}
}

// A client given only a follower's address is sent to the leader.
func TestClusterFollowerRedirects(t *testing.T) {
	c := testenv.StartCluster(t, bin, 3, raftTimeout...)
	leader := c.Leader(t, 20*time.Second)
	var follower *testenv.DLM
	for _, n := range c.Nodes {
		if n != leader {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := dial(t, follower.Addr())
	l, err := dlm.New(s).Acquire(ctx, "redirected", dlm.WithWait(0))
	if err != nil {
		t.Fatalf("through a follower: %v", err)
	}
	// The grant went through the leader. A loaded machine may have moved
	// the leadership meanwhile: a node lists the lock once it has applied
	// it.
	ls := newLister(t, leader.Addr())
	storetest.Await(t, 10*time.Second, "the lock listed by the leader", func() bool {
		h := ls.resource("redirected").GetHolders()
		return len(h) == 1 && h[0].GetToken() == l.Token()
	})
}

// A client holding a lock is killed, and the leader is killed every half
// TTL (the flap: 0.5 x TTL for 10 x TTL): a waiter is granted the
// lock within 2 x TTL + 2 election timeouts of the holder's death.
func TestDeadClientLosesItsLocksWhileLeadersChange(t *testing.T) {
	const ttl = 4 * time.Second
	const election = 200 * time.Millisecond
	c, died, granted := deadHolder(t, ttl, election)
	kills := 0
	flap := time.NewTicker(ttl / 2)
	defer flap.Stop()
	for time.Since(died) < 10*ttl {
		select {
		case at, ok := <-granted:
			if !ok {
				t.FailNow()
			}
			t.Logf("granted %s after the holder died, %d leaders killed meanwhile (2 x TTL + 2 election timeouts = %s)",
				at.Sub(died).Round(time.Millisecond), kills, 2*ttl+2*election)
			if kills < 2 {
				t.Fatalf("only %d leaders killed before the grant: the run did not test leader changes", kills)
			}
			return
		case <-flap.C:
		}
		l, err := c.AwaitLeader(5 * time.Second)
		if err != nil {
			continue // an election under way: the next tick
		}
		l.Kill()
		kills++
		if err := l.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("the waiter was not granted within %s of the holder's death while the leader was killed every %s (%d kills)", 10*ttl, ttl/2, kills)
}

// A client holding a lock is killed, and then every leader is killed as
// soon as it serves, for 3 x TTL: no leader serves long enough to record
// anything of its own, yet the dead client's silence is counted from the
// first promotion after its death (each new leader records the sessions
// unheard before it serves). The lock goes free during the flap, or at
// the latest once a leader stays: within 3/4 TTL of the flap's end, where
// a count started again by each promotion would take TTL + margin after it
// (0.3-1.2 s here, on a busy machine too).
func TestDeadClientLosesItsLocksWhenLeadersServeBriefly(t *testing.T) {
	const ttl = 4 * time.Second
	const election = 200 * time.Millisecond
	c, died, granted := deadHolder(t, ttl, election)
	kills := 0
	for time.Since(died) < 3*ttl {
		l, err := c.AwaitLeader(5 * time.Second)
		if err != nil {
			continue
		}
		l.Kill()
		kills++
		if err := l.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	select {
	case at, ok := <-granted:
		if !ok {
			t.FailNow()
		}
		t.Logf("granted %s after the holder died, %s after the flap's end; %d leaders killed as they served",
			at.Sub(died).Round(time.Millisecond), at.Sub(end).Round(time.Millisecond), kills)
	case <-time.After(3 * ttl / 4):
		t.Fatalf("the waiter was not granted within %s of the flap's end (%s after the holder's death, %d leaders killed as they served)",
			3*ttl/4, time.Since(died).Round(time.Millisecond), kills)
	}
}

// deadHolder starts a 3-node cluster, a child process holding lock "flap"
// on a session of ttl, and a waiter for that lock (on a session that
// outlasts every election of the run), kills the child once the waiter is
// queued, and returns the cluster, the time of the kill and the channel on
// which the waiter's grant time arrives (closed if its Acquire failed).
func deadHolder(t *testing.T, ttl, election time.Duration) (*testenv.Cluster, time.Time, <-chan time.Time) {
	t.Helper()
	c := testenv.StartCluster(t, bin, 3, "-raft-timeout", election.String())
	leader := c.Leader(t, 20*time.Second)
	addrs := c.Addrs()
	ctx := storetest.Context(t)
	child := startChild(t, addrs, "flap", ttl)

	w := dlm.New(dial(t, addrs, dlmserver.WithSessionTTL(time.Minute)))
	granted := make(chan time.Time, 1)
	go func() {
		l, err := w.Acquire(ctx, "flap", dlm.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
			close(granted)
			return
		}
		granted <- time.Now()
		l.Release(ctx)
	}()
	lister := newLister(t, leader.Addr())
	storetest.Await(t, 10*time.Second, "the waiter queued", func() bool { return lister.waiting("flap") == 1 })

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return c, time.Now(), granted
}

package raftnode

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A follower that was down while the cluster took entries is fed as soon
// as it is back: the leader's replication to it was retried in the
// transport, so Raft counted no failure and has no backoff to sit out
// (without the retries it counts about ten in 1.5s and may then wait over a
// second). And a leader whose replication retries to a dead follower
// closes promptly, leaving no goroutine behind.
func TestRestartedFollowerIsFedAtOnce(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	logs := &servertest.LogBuffer{}
	var peers []Peer
	for i, a := range freeAddrs(t, 3) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: a})
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	open := func(i int) *Node {
		n, err := Open(Config{ID: peers[i].ID, Dir: dirs[i], BindAddr: peers[i].Addr, Peers: peers, Raft: clusterRaft,
			Logger: slog.New(slog.NewTextHandler(logs, nil)).With("node", peers[i].ID)})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	nodes := make([]*Node, len(peers))
	closeNode := func(i int) {
		if err := nodes[i].Close(); err != nil {
			t.Errorf("close %s: %v", peers[i].ID, err)
		}
		nodes[i] = nil
	}
	defer func() {
		for i, n := range nodes {
			if n != nil {
				closeNode(i)
			}
		}
	}()
	for i := range nodes {
		nodes[i] = open(i)
	}
	leader := clusterLeader(t, nodes)
	f := 0 // the follower that goes down
	for nodes[f] == leader {
		f++
	}
	sid := propose(t, leader, servertest.Open("a"))[0].Session
	awaitApplied(t, nodes[f], leader.FSM().AppliedIndex(), 5*time.Second)

	closeNode(f)
	failed := leader.retrying.failed.Load()
	for seq, down := uint64(1), time.Now(); time.Since(down) < 1500*time.Millisecond; seq++ {
		propose(t, leader, servertest.Lock(sid, seq, fmt.Sprintf("r%d", seq), dlmpb.Mode_MODE_EX))
		time.Sleep(20 * time.Millisecond)
	}
	target := leader.FSM().AppliedIndex()
	nodes[f] = open(f)
	back := time.Now()
	awaitApplied(t, nodes[f], target, 5*time.Second) // a sanity bound: it takes tens of ms
	t.Logf("%s caught up %s after its restart", peers[f].ID, time.Since(back).Round(time.Millisecond))
	if !leader.IsLeader() {
		t.Skip("the leader changed meanwhile (a loaded machine): the failures below are not comparable")
	}
	if n := leader.retrying.failed.Load() - failed; n > 1 {
		t.Errorf("Raft counted %d failed appends to %s while it was down, want at most 1", n, peers[f].ID)
	}
	if !logs.Has("retrying until it answers", "peer="+peers[f].ID) || !logs.Has("replication to a peer resumed", "peer="+peers[f].ID) {
		t.Errorf("no retries logged:\n%s", logs)
	}

	// Down again, with an entry to replicate: the leader retries; then it
	// closes.
	closeNode(f)
	retries := logs.Count("retrying until it answers", "peer="+peers[f].ID)
	propose(t, leader, servertest.Lock(sid, 1000, "last", dlmpb.Mode_MODE_EX))
	for deadline := time.Now().Add(5 * time.Second); logs.Count("retrying until it answers", "peer="+peers[f].ID) == retries; {
		if time.Now().After(deadline) {
			t.Fatalf("the leader does not retry its replication to %s", peers[f].ID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	for i, n := range nodes {
		if n == leader {
			closeNode(i)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the retrying leader took %s to close", d)
	}
}

// clusterRaft is Raft's configuration for in-process clusters: quick, but
// not so quick that a loaded machine sees elections all the time.
func clusterRaft(c *raft.Config) {
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
}

// freeAddrs returns n loopback addresses that were free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

// clusterLeader waits until one node leads and has applied its log.
func clusterLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var leaders []*Node
		for _, n := range nodes {
			if n.IsLeader() {
				leaders = append(leaders, n)
			}
		}
		if len(leaders) == 1 && leaders[0].Barrier(ctx) == nil {
			return leaders[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// awaitApplied waits until n has applied index.
func awaitApplied(t *testing.T, n *Node, index uint64, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); n.FSM().AppliedIndex() < index; {
		if time.Now().After(deadline) {
			t.Fatalf("applied %d of %d after %s", n.FSM().AppliedIndex(), index, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestFollowerWhoseWritesFailedIsFedAgain: a follower whose log writes
// fail for a while (a full disk) catches up once they succeed, under a
// steady load. hashicorp/raft's pipelined replication stops feeding a
// follower for good when the follower answers a failure while the next
// request is on its way (hashicorp/raft#612: heartbeats go on, entries do
// not, and no election heals it); the node replicates without pipelining
// (MaxRPCsInFlight 1).
func TestFollowerWhoseWritesFailedIsFedAgain(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	var peers []Peer
	for i, a := range freeAddrs(t, 3) {
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: a})
	}
	nodes := make([]*Node, len(peers))
	faults := make([]*faultSwitch, len(peers))
	for i := range nodes {
		faults[i] = &faultSwitch{store: StoreLog}
		n, err := Open(Config{ID: peers[i].ID, Dir: t.TempDir(), BindAddr: peers[i].Addr, Peers: peers, Raft: clusterRaft,
			StorageFault: faults[i].fault})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	leader := clusterLeader(t, nodes)
	f := 0
	for nodes[f] == leader {
		f++
	}
	sid := propose(t, leader, servertest.Open("a"))[0].Session

	// A steady load, so that requests are in flight to the follower when
	// it fails one.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, _ = leader.Propose(ctx, servertest.Lock(sid, uint64(w)<<32|seq, fmt.Sprintf("w%d-%d", w, seq), dlmpb.Mode_MODE_EX))
				cancel()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	enospc := error(&os.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC})
	for cycle := range 30 {
		faults[f].set(enospc)
		time.Sleep(50 * time.Millisecond) // the fault lasts: a duration, not a synchronisation
		faults[f].set(nil)
		if !leader.IsLeader() {
			t.Skip("the leader changed (a loaded machine): the follower's case is not tested")
		}
		awaitApplied(t, nodes[f], leader.FSM().AppliedIndex(), 10*time.Second)
		t.Logf("cycle %d: %s caught up", cycle, peers[f].ID)
	}
}

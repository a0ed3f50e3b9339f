package server

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fastRaft shortens Raft's timeouts so that a single node elects itself in
// tens of milliseconds.
func fastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// openNode opens a node and waits until it leads and has applied its log.
func openNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.Raft == nil {
		cfg.Raft = fastRaft
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		n.Close()
		t.Fatal(err)
	}
	if err := n.Barrier(ctx); err != nil {
		n.Close()
		t.Fatal(err)
	}
	return n
}

// checkNoLeaks fails if goroutines of raft, bbolt or this package outlive
// the test's nodes, after a grace period of up to 10 s.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded machine is slow to unwind
	for {
		leaked := leakedGoroutines()
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "checkNoLeaks") || strings.Contains(g, "leakedGoroutines") {
			continue
		}
		if strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "go.etcd.io/bbolt") ||
			strings.Contains(g, "dlm/server.(*Node)") || strings.Contains(g, "dlm/server.(*Server)") {
			out = append(out, g)
		}
	}
	return out
}

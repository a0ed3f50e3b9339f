package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"
)

// openNode opens a node and waits until it leads and has applied its log.
func openNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.Raft == nil {
		cfg.Raft = servertest.FastRaft
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

package raftnode

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"
)

// TestWaitForLeaderHonoursContext: a node of a cluster without quorum
// (its other voter is down) waits for a leader until its context ends,
// then returns the context's error; a node alone finds itself the leader.
func TestWaitForLeaderHonoursContext(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	self, down := free(), free() // nothing listens at down: the other voter is down
	n, err := Open(Config{InMemory: true, Raft: servertest.FastRaft, BindAddr: self,
		Peers: []Peer{{ID: "node-1", Addr: self}, {ID: "node-2", Addr: down}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.WaitForLeader(ctx) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitForLeader after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForLeader ignored its context")
	}

	alone := openNode(t, Config{InMemory: true})
	defer alone.Close()
	if err := alone.WaitForLeader(testCtx(t)); err != nil {
		t.Fatalf("a node alone: %v", err)
	}
}

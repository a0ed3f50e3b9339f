package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/server"
	"github.com/dlmhq/dlm/server/raftnode"
)

// BenchmarkInProcess runs the dlmserver store's workloads against a server in
// the benchmark's own process (in-memory log), to set apart what the lock
// service costs from what a round trip between two processes costs:
//
//	go test -run '^$' -bench InProcess -benchtime 2s ./server/
func BenchmarkInProcess(b *testing.B) {
	s, err := server.Start(server.Config{Node: raftnode.Config{InMemory: true, Raft: func(c *raft.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	}}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	store, err := dlmserver.Dial(ctx, s.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(context.Background())
	c := dlm.New(store)
	b.Run("Uncontended", func(b *testing.B) { storetest.Uncontended(b, c) })
	b.Run("ParallelDistinctKeys", func(b *testing.B) { storetest.ParallelDistinctKeys(b, c) })
	b.Run("ContendedHandoff", func(b *testing.B) { storetest.ContendedHandoff(b, c) })
}

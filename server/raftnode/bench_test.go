package raftnode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// BenchmarkPropose measures Propose throughput in durable mode (bbolt,
// fsync per append) with 64 concurrent proposers, each locking and then
// releasing its own resource: two commands per iteration, reported as
// cmds/s.
func BenchmarkPropose(b *testing.B) {
	for _, store := range []string{LogStoreWAL, LogStoreBolt} {
		b.Run(store, func(b *testing.B) { benchPropose(b, store) })
	}
}

func benchPropose(b *testing.B, store string) {
	n := openNode(b, Config{Dir: b.TempDir(), LogStore: store})
	defer n.Close()
	const proposers = 64
	ctx := context.Background()
	opens := make([]*dlmpb.Command, proposers)
	for i := range opens {
		opens[i] = servertest.Open(fmt.Sprint("p", i))
	}
	sessions, err := n.Propose(ctx, opens...)
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism((proposers + 1) / 2) // ×GOMAXPROCS (2) goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := int(next.Add(1)-1) % proposers
		sid := sessions[w].Session
		res := fmt.Sprint("bench-", w)
		for pb.Next() {
			rs, err := n.Propose(ctx, servertest.Lock(sid, 0, res, dlmpb.Mode_MODE_EX))
			if err != nil || rs[0].Status != locktable.StatusGranted {
				b.Errorf("lock: %v %+v", err, rs)
				return
			}
			if _, err := n.Propose(ctx, servertest.Release(sid, rs[0].Lock)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "cmds/s")
}

// BenchmarkProposeSequential measures the latency of one Propose at a time
// (one Raft entry, one fsync each) in durable and in-memory mode.
func BenchmarkProposeSequential(b *testing.B) {
	for _, store := range []string{LogStoreWAL, LogStoreBolt} {
		b.Run(store, func(b *testing.B) { benchProposeSequential(b, store) })
	}
}

func benchProposeSequential(b *testing.B, store string) {
	for _, mode := range []string{"durable", "in-memory"} {
		b.Run(mode, func(b *testing.B) {
			cfg := Config{Dir: b.TempDir(), InMemory: mode == "in-memory"}
			n := openNode(b, cfg)
			defer n.Close()
			ctx := context.Background()
			rs, err := n.Propose(ctx, servertest.Open("seq"))
			if err != nil {
				b.Fatal(err)
			}
			sid := rs[0].Session
			for b.Loop() {
				if _, err := n.Propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}}); err != nil {
					b.Fatal(err)
				}
			}
			_ = sid
		})
	}
}

package main

import (
	"fmt"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

// serverGoals are the dlm server's speed targets: against PostgreSQL
// advisory locks and etcd's Mutex measured in the same run (each ratio
// judged on the rounds' ratios, see versus), and against
// the physical floor (a sync and two loopback round trips, about 0.3 ms).
func (rep *report) serverGoals() []goal {
	var gs []goal
	get := func(w, id string) (workload.Result, row, bool) { return rep.pick(w, faster, id) }
	p50 := func(text string, res workload.Result, bound time.Duration) goal {
		return goal{text, dur(res.P50), res.P50 <= bound}
	}
	// vs compares workload w of target id with alternative alt (see
	// against).
	vs := func(text, w, id, alt string, limit float64) []goal {
		g, _, ok := rep.against(w, id, limit, alt)
		if !ok {
			return nil
		}
		g.text = text
		return []goal{g}
	}

	if res, _, ok := get("uncontended", "dlm-server-1"); ok {
		gs = append(gs, p50("dlm server, 1 node (durable), uncontended: p50 ≤ 0.6 ms", res, 600*time.Microsecond))
	}
	gs = append(gs, vs("dlm server, 1 node (durable), uncontended: p50 ≤ 0.35× etcd's Mutex", "uncontended", "dlm-server-1", "etcd-mutex", 0.35)...)
	if res, _, ok := get("contended", "dlm-server-1"); ok {
		gs = append(gs, goal{"dlm server, 1 node (durable), contended: ≥ 650/s", fmt.Sprintf("%.0f/s", res.PerSecond), res.PerSecond >= 650})
		gs = append(gs, vs("dlm server, 1 node (durable), contended: ≥ 0.95× PostgreSQL advisory locks", "contended", "dlm-server-1", "pg-advisory", 0.95)...)
		gs = append(gs,
			goal{"dlm server, 1 node (durable), contended: Jain ≥ 0.99", fmt.Sprintf("%.3f", res.Jain), res.Jain >= 0.99},
			goal{"dlm server, 1 node (durable), contended: longest wait ≤ 30 ms", dur(res.MaxWait), res.MaxWait <= 30*time.Millisecond})
	}
	gs = append(gs, vs(fmt.Sprintf("dlm server, 1 node (durable), %d lockers on distinct keys: ≥ 1.0× PostgreSQL advisory locks", rep.Lockers), "distinct-keys", "dlm-server-1", "pg-advisory", 1.0)...)
	gs = append(gs, vs("dlm server, in-memory log, uncontended: p50 ≤ 1.5× PostgreSQL advisory locks", "uncontended", "dlm-server-mem", "pg-advisory", 1.5)...)
	gs = append(gs, vs(fmt.Sprintf("dlm server, in-memory log, %d lockers on distinct keys: ≥ 1.3× PostgreSQL advisory locks", rep.Lockers), "distinct-keys", "dlm-server-mem", "pg-advisory", 1.3)...)
	gs = append(gs, vs("dlm server, in-memory log, contended: ≥ 1.0× PostgreSQL advisory locks", "contended", "dlm-server-mem", "pg-advisory", 1.0)...)
	if res, _, ok := get("uncontended", "dlm-server-3"); ok {
		gs = append(gs, p50("dlm server, 3 nodes (durable), uncontended: p50 ≤ 2.5 ms", res, 2500*time.Microsecond))
	}
	if res, _, ok := get("contended", "dlm-server-3"); ok {
		gs = append(gs, goal{"dlm server, 3 nodes (durable), contended: ≥ 400/s", fmt.Sprintf("%.0f/s", res.PerSecond), res.PerSecond >= 400})
	}
	gs = append(gs, vs(fmt.Sprintf("dlm server, 3 nodes (durable), %d lockers on distinct keys: ≥ 1.5× etcd's Mutex (one node)", rep.Lockers), "distinct-keys", "dlm-server-3", "etcd-mutex", 1.5)...)
	return gs
}

package main

import (
	"fmt"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

// serverGoals are the dlm server's speed targets: against PostgreSQL
// advisory locks and etcd's Mutex measured in the same run, and against
// the physical floor (a sync and two loopback round trips, about 0.3 ms).
func (rep *report) serverGoals() []goal {
	var gs []goal
	get := func(w, id string) (workload.Result, bool) {
		res, _, ok := rep.pick(w, faster, id)
		return res, ok
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	pg := map[string]workload.Result{}
	for _, w := range workloads {
		if res, ok := get(w, "pg-advisory"); ok {
			pg[w] = res
		}
	}
	etcd, etcdOK := get("uncontended", "etcd-mutex")
	etcdKeys, etcdKeysOK := get("distinct-keys", "etcd-mutex")
	p50 := func(text string, res workload.Result, bound time.Duration) goal {
		return goal{text, dur(res.P50), res.P50 <= bound}
	}
	vsPG := func(text, w string, res workload.Result, min float64) []goal {
		alt, ok := pg[w]
		if !ok {
			return nil
		}
		x := ratio(res.PerSecond, alt.PerSecond)
		return []goal{{text, fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", res.PerSecond, alt.PerSecond, x), x >= min}}
	}

	if res, ok := get("uncontended", "dlm-server-1"); ok {
		gs = append(gs, p50("dlm server, 1 node (durable), uncontended: p50 ≤ 0.6 ms", res, 600*time.Microsecond))
		if etcdOK {
			x := ratio(float64(res.P50), float64(etcd.P50))
			gs = append(gs, goal{"dlm server, 1 node (durable), uncontended: p50 ≤ 0.35× etcd's Mutex",
				fmt.Sprintf("%s vs %s: %.2f×", dur(res.P50), dur(etcd.P50), x), x > 0 && x <= 0.35})
		}
	}
	if res, ok := get("contended", "dlm-server-1"); ok {
		gs = append(gs, goal{"dlm server, 1 node (durable), contended: ≥ 650/s", fmt.Sprintf("%.0f/s", res.PerSecond), res.PerSecond >= 650})
		gs = append(gs, vsPG("dlm server, 1 node (durable), contended: ≥ 0.95× PostgreSQL advisory locks", "contended", res, 0.95)...)
		gs = append(gs,
			goal{"dlm server, 1 node (durable), contended: Jain ≥ 0.99", fmt.Sprintf("%.3f", res.Jain), res.Jain >= 0.99},
			goal{"dlm server, 1 node (durable), contended: longest wait ≤ 30 ms", dur(res.MaxWait), res.MaxWait <= 30*time.Millisecond})
	}
	if res, ok := get("distinct-keys", "dlm-server-1"); ok {
		gs = append(gs, vsPG(fmt.Sprintf("dlm server, 1 node (durable), %d lockers on distinct keys: ≥ 1.0× PostgreSQL advisory locks", rep.Lockers), "distinct-keys", res, 1.0)...)
	}
	if res, ok := get("uncontended", "dlm-server-mem"); ok {
		if alt, ok := pg["uncontended"]; ok {
			x := ratio(float64(res.P50), float64(alt.P50))
			gs = append(gs, goal{"dlm server, in-memory log, uncontended: p50 ≤ 1.5× PostgreSQL advisory locks",
				fmt.Sprintf("%s vs %s: %.2f×", dur(res.P50), dur(alt.P50), x), x > 0 && x <= 1.5})
		}
	}
	if res, ok := get("distinct-keys", "dlm-server-mem"); ok {
		gs = append(gs, vsPG(fmt.Sprintf("dlm server, in-memory log, %d lockers on distinct keys: ≥ 1.3× PostgreSQL advisory locks", rep.Lockers), "distinct-keys", res, 1.3)...)
	}
	if res, ok := get("contended", "dlm-server-mem"); ok {
		gs = append(gs, vsPG("dlm server, in-memory log, contended: ≥ 1.0× PostgreSQL advisory locks", "contended", res, 1.0)...)
	}
	if res, ok := get("uncontended", "dlm-server-3"); ok {
		gs = append(gs, p50("dlm server, 3 nodes (durable), uncontended: p50 ≤ 2.5 ms", res, 2500*time.Microsecond))
	}
	if res, ok := get("contended", "dlm-server-3"); ok {
		gs = append(gs, goal{"dlm server, 3 nodes (durable), contended: ≥ 400/s", fmt.Sprintf("%.0f/s", res.PerSecond), res.PerSecond >= 400})
	}
	if res, ok := get("distinct-keys", "dlm-server-3"); ok && etcdKeysOK {
		x := ratio(res.PerSecond, etcdKeys.PerSecond)
		gs = append(gs, goal{fmt.Sprintf("dlm server, 3 nodes (durable), %d lockers on distinct keys: ≥ 1.5× etcd's Mutex (one node)", rep.Lockers),
			fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", res.PerSecond, etcdKeys.PerSecond, x), x >= 1.5})
	}
	return gs
}

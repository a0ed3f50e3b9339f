package main

import (
	"fmt"
	"time"
)

// storeGoals are the targets of dlm's stores against the library each
// replaces, measured in the same run (the alternative's best variant by its
// median round: its default retry or a 1 ms one), each ratio judged on the
// rounds' ratios (see versus).
func (rep *report) storeGoals() []goal {
	var gs []goal
	// uncontended: p50 at most limit times the alternative's.
	uncontended := func(store, id string, limit float64, alts ...string) {
		if g, alt, ok := rep.against("uncontended", id, limit, alts...); ok {
			g.text = fmt.Sprintf("%s: uncontended p50 ≤ %.2g× %s", store, limit, alt)
			gs = append(gs, g)
		}
	}
	// throughput: workload w's rate at least min times the alternative's.
	throughput := func(store, id, w string, min float64, alts ...string) {
		if g, alt, ok := rep.against(w, id, min, alts...); ok {
			g.text = fmt.Sprintf("%s, %s: ≥ %.2g× %s", store, w, min, alt)
			gs = append(gs, g)
		}
	}
	// fair: the contended workload's Jain index, and its longest wait
	// unless wait is 0.
	fair := func(store, id string, jain float64, wait time.Duration) {
		res, _, ok := rep.pick("contended", faster, id)
		if !ok {
			return
		}
		text := fmt.Sprintf("%s, contended: Jain ≥ %.4g", store, jain)
		if wait > 0 {
			text += ", longest wait ≤ " + dur(wait)
		}
		gs = append(gs, goal{text, fmt.Sprintf("Jain %.3f, longest wait %s", res.Jain, dur(res.MaxWait)),
			res.Jain >= jain && (wait == 0 || res.MaxWait <= wait)})
	}

	redsync := []string{"redsync-5", "redsync-5-fast"}
	fair("dlm redlock, 5 nodes", "dlm-redlock-5", 0.95, 200*time.Millisecond)
	throughput("dlm redlock, 5 nodes", "dlm-redlock-5", "contended", 1, redsync...)
	throughput("dlm redlock, 5 nodes", "dlm-redlock-5", "distinct-keys", 1, redsync...)
	uncontended("dlm redlock, 5 nodes", "dlm-redlock-5", 1, redsync...)

	uncontended("dlm etcd", "dlm-etcd", 1, "etcd-mutex")
	throughput("dlm etcd", "dlm-etcd", "distinct-keys", 1, "etcd-mutex")
	throughput("dlm etcd", "dlm-etcd", "contended", 2, "etcd-mutex")
	fair("dlm etcd", "dlm-etcd", 0.9995, 0)

	redislock := []string{"redislock", "redislock-fast"}
	uncontended("dlm redis", "dlm-redis", 1.1, redislock...)
	throughput("dlm redis", "dlm-redis", "distinct-keys", 0.95, redislock...)
	throughput("dlm redis", "dlm-redis", "contended", 1, redislock...)
	fair("dlm redis", "dlm-redis", 0.99, 30*time.Millisecond)

	throughput("dlm postgres", "dlm-postgres", "distinct-keys", 0.9, "pg-advisory")
	uncontended("dlm postgres", "dlm-postgres", 1.2, "pg-advisory")
	return gs
}

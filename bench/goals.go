package main

import (
	"fmt"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

// goal is one of the targets dlm set itself, as measured in a run.
type goal struct {
	text     string
	measured string
	met      bool
}

// pick returns the result of workload w of the rows with the given ids that
// best(a, b) prefers, and the row it came from.
func (rep *report) pick(w string, best func(a, b workload.Result) bool, ids ...string) (workload.Result, string, bool) {
	var (
		out  workload.Result
		name string
		ok   bool
	)
	for _, r := range rep.Rows {
		match := len(ids) == 0 && !r.DLM
		for _, id := range ids {
			match = match || r.ID == id
		}
		if !match || r.Err != "" {
			continue
		}
		if res, found := r.result(w); found && (!ok || best(res, out)) {
			out, name, ok = res, r.Name, true
		}
	}
	return out, name, ok
}

func faster(a, b workload.Result) bool  { return a.PerSecond > b.PerSecond }
func quicker(a, b workload.Result) bool { return a.P50 < b.P50 }

// goals evaluates the targets on what the run measured; a target whose
// rows did not run is left out.
func (rep *report) goals() []goal {
	var gs []goal
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	gs = append(gs, rep.serverGoals()...)
	gs = append(gs, rep.pythonGoals()...)
	// dlm's Redlock against redsync, both on 5 nodes.
	if res, _, ok := rep.pick("distinct-keys", faster, "dlm-redlock-5"); ok {
		if alt, _, altOK := rep.pick("distinct-keys", faster, "redsync-5", "redsync-5-fast"); altOK {
			x := ratio(res.PerSecond, alt.PerSecond)
			gs = append(gs, goal{"dlm redlock, 5 nodes: ≥ 2× redsync's throughput (distinct keys, cycles/s)",
				fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", res.PerSecond, alt.PerSecond, x), x >= 2})
		}
	}
	if res, _, ok := rep.pick("contended", faster, "dlm-redlock-5"); ok {
		if alt, altName, altOK := rep.pick("contended", faster, "redsync-5", "redsync-5-fast"); altOK {
			x := ratio(res.PerSecond, alt.PerSecond)
			gs = append(gs, goal{"dlm redlock, 5 nodes: ≥ 2× redsync's throughput (contended, acquisitions/s)",
				fmt.Sprintf("%.0f/s vs %.0f/s (%s): %.2f×", res.PerSecond, alt.PerSecond, altName, x), x >= 2})
		}
	}
	if res, _, ok := rep.pick("uncontended", quicker, "dlm-redlock-5"); ok {
		if alt, _, altOK := rep.pick("uncontended", quicker, "redsync-5", "redsync-5-fast"); altOK {
			x := ratio(float64(res.P50), float64(alt.P50))
			gs = append(gs, goal{"dlm redlock, 5 nodes: uncontended p50 ≤ 0.7× redsync's",
				fmt.Sprintf("%s vs %s: %.2f×", dur(res.P50), dur(alt.P50), x), x > 0 && x <= 0.7})
		}
	}
	// dlm's single-Redis store against bsm/redislock.
	if res, _, ok := rep.pick("uncontended", quicker, "dlm-redis"); ok {
		if alt, _, altOK := rep.pick("uncontended", quicker, "redislock", "redislock-fast"); altOK {
			x := ratio(float64(res.P50), float64(alt.P50))
			gs = append(gs, goal{"dlm redis: uncontended p50 no slower than bsm/redislock's",
				fmt.Sprintf("%s vs %s: %.2f×", dur(res.P50), dur(alt.P50), x), x > 0 && x <= 1})
		}
	}
	if res, _, ok := rep.pick("contended", faster, "dlm-redis"); ok {
		gs = append(gs, goal{"dlm redis, contended: fair (Jain ≥ 0.95) with no multi-second wait",
			fmt.Sprintf("Jain %.3f, longest wait %s", res.Jain, dur(res.MaxWait)), res.Jain >= 0.95 && res.MaxWait < time.Second})
	}
	return gs
}

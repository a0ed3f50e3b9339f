package main

import (
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
	gs = append(gs, rep.serverGoals()...)
	gs = append(gs, rep.pythonGoals()...)
	gs = append(gs, rep.storeGoals()...)
	return gs
}

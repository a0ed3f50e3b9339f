package main

import (
	"fmt"
	"slices"

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
func (rep *report) pick(w string, best func(a, b workload.Result) bool, ids ...string) (workload.Result, row, bool) {
	var (
		out  workload.Result
		from row
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
			out, from, ok = res, r, true
		}
	}
	return out, from, ok
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

// ratio is a target's figure against an alternative's: the median of the
// rounds' ratios, each between the two figures of one round.
type ratio struct {
	x      float64 // the median; of two middle rounds, the one worse for the target
	lo, hi float64 // the lowest and highest round's
	rounds int
}

// String gives the median, and the range of the rounds when there are
// several.
func (r ratio) String() string {
	if r.rounds < 2 {
		return fmt.Sprintf("%.2f×", r.x)
	}
	return fmt.Sprintf("%.2f× (rounds %.2f-%.2f)", r.x, r.lo, r.hi)
}

// versus compares workload w of rows a and b by fig (a p50 or a rate).
// Every round runs both, the uncontended and distinct-keys workloads in
// interleaved turns, so a round's ratio sets two figures measured side by
// side; the median of those leaves out what the machine did differently
// from one round to the next, which the ratio of the two rows' medians
// (rounds minutes apart) keeps. higher says a higher ratio is better for
// a (a rate), which decides between two middle rounds. ok is false when
// no round measured both.
func versus(w string, a, b row, fig func(workload.Result) float64, higher bool) (ratio, bool) {
	ra, rb := a.rounds, b.rounds
	if len(ra) == 0 || len(ra) != len(rb) {
		ra, rb = []row{a}, []row{b}
	}
	var xs []float64
	for i := range ra {
		x, okX := ra[i].result(w)
		y, okY := rb[i].result(w)
		if okX && okY && fig(y) > 0 && ra[i].Err == "" && rb[i].Err == "" {
			xs = append(xs, fig(x)/fig(y))
		}
	}
	if len(xs) == 0 {
		return ratio{}, false
	}
	slices.Sort(xs)
	m := xs[len(xs)/2] // of two middle ones, the higher
	if len(xs)%2 == 0 && higher {
		m = xs[len(xs)/2-1]
	}
	return ratio{x: m, lo: xs[0], hi: xs[len(xs)-1], rounds: len(xs)}, true
}

// against compares workload w of target id with the best of alts (the
// lowest p50 uncontended, the highest rate otherwise), judged on the rounds'
// ratios (see versus): the goal is at most limit times the alternative's
// p50, or at least limit times its rate. The goal's text is left to the
// caller, given the alternative's name. ok is false when either was not
// measured.
func (rep *report) against(w, id string, limit float64, alts ...string) (g goal, alt string, ok bool) {
	best, fig, higher := faster, byRate, true
	if w == "uncontended" {
		best, fig, higher = quicker, byP50, false
	}
	res, r, ok := rep.pick(w, best, id)
	other, altRow, altOK := rep.pick(w, best, alts...)
	if !ok || !altOK {
		return goal{}, "", false
	}
	x, ok := versus(w, r, altRow, fig, higher)
	if !ok {
		return goal{}, "", false
	}
	if higher {
		g = goal{measured: fmt.Sprintf("%.0f/s vs %.0f/s: %s", res.PerSecond, other.PerSecond, x), met: x.x >= limit}
	} else {
		g = goal{measured: fmt.Sprintf("%s vs %s: %s", dur(res.P50), dur(other.P50), x), met: x.x > 0 && x.x <= limit}
	}
	return g, altRow.Name, true
}

func byP50(r workload.Result) float64  { return float64(r.P50) }
func byRate(r workload.Result) float64 { return r.PerSecond }

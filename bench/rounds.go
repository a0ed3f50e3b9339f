package main

import (
	"cmp"
	"errors"
	"slices"

	"github.com/dlmhq/dlm/internal/workload"
)

// Rounds: one run of every target is at the mercy of whatever else the
// machine does during its few seconds, and a ratio between two targets
// measured a minute apart swings with it. With -rounds N the targets run
// N times, interleaved (every target once per round, the order reversed
// on every other round so that a slow drift falls on all alike), and each
// workload reports its median round.

// medianRow merges the rounds of one target: for each workload, the
// result (and the dlm server's cost) of its median round by the
// workload's headline figure, with the violations of every round summed,
// so that one broken round still shows. Errors of any round are kept.
func medianRow(rounds []row) row {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := row{ID: rounds[0].ID, Name: rounds[0].Name, DLM: rounds[0].DLM, rounds: rounds}
	var errs []error
	for _, r := range rounds {
		if r.Err != "" {
			errs = append(errs, errors.New(r.Err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		out.Err = err.Error()
	}
	// runRound gives every round a result and a cost per workload, in
	// the same order.
	for i := range rounds[0].Results {
		byFigure := slices.Clone(rounds)
		// Best first; the middle one, or the worse of the two middle ones.
		slices.SortStableFunc(byFigure, func(a, b row) int { return better(a.Results[i], b.Results[i]) })
		m := byFigure[len(byFigure)/2]
		res := m.Results[i]
		res.Violations, res.Errors = 0, 0
		for _, r := range rounds {
			res.Violations += r.Results[i].Violations
			res.Errors += r.Results[i].Errors
		}
		out.Results = append(out.Results, res)
		out.Costs = append(out.Costs, m.Costs[i])
	}
	return out
}

// better orders two results of one workload, best first, by the figure
// its table leads with: the p50 of an uncontended cycle, the rate of the
// others.
func better(a, b workload.Result) int {
	if a.Workload == "uncontended" {
		return cmp.Compare(a.P50, b.P50)
	}
	return cmp.Compare(b.PerSecond, a.PerSecond)
}

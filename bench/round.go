package main

import (
	"context"
	"strings"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
)

// turn is how long one target runs uncontended cycles before the next one
// takes over (see runRound).
const turn = 100 * time.Millisecond

// distinctTurn is how long one target's lockers run on distinct keys, and
// counted, before the next target takes over; distinctWarm how long they
// run before that, not counted (see workload.DistinctKeysTurns). The
// command's defaults; a config carries its own.
const (
	distinctTurn = 500 * time.Millisecond
	distinctWarm = 250 * time.Millisecond
)

// opened is a target of a round, open.
type opened struct {
	lk     workload.Locker
	close  func()
	procs  []*testenv.DLM
	pids   []int
	spent  usage   // what its uncontended turns cost the servers, summed
	spread usage   // what its distinct-keys turns cost them, summed
	scrape float64 // see scrapeAllocs
}

// runRound runs one round of the targets in order. It opens them all, runs
// the uncontended workload on them in turns of 100 ms (in a random order
// each sweep, see workload.UncontendedTurns), so that an
// uncontended cycle's time, which a shared machine's drift moves by tens
// of percent within seconds, compares the targets at the same moments;
// then the distinct-keys workload likewise, in turns of cfg.distinctTurn
// after a warm-up of cfg.distinctWarm each (workload.DistinctKeysTurns);
// then runs the contended workload on each target, one at a time, and
// closes it.
func runRound(ctx context.Context, cfg config, order []target, srv *servers) []row {
	rows := make([]row, len(order))
	open := make([]*opened, len(order))
	defer func() {
		for _, o := range open {
			if o != nil {
				o.close()
			}
		}
	}()
	var lks []workload.Locker
	var names, spreadNames []string // of the uncontended and distinct-keys resources
	var at []int                    // the index in order of each locker
	for i, t := range order {
		rows[i] = row{ID: t.id, Name: t.name, DLM: t.dlm}
		lk, closeLocker, err := t.open(ctx, srv)
		if err != nil {
			rows[i].Err = err.Error()
			continue
		}
		o := &opened{lk: lk, close: closeLocker}
		o.procs, o.pids = t.processes(srv)
		o.spent = usage{dlmOK: len(o.procs) > 0, storeOK: len(o.pids) > 0}
		o.spread = o.spent
		o.scrape = scrapeAllocs(ctx, o.procs)
		open[i] = o
		lks = append(lks, lk)
		names = append(names, "bench/"+t.id+"/uncontended")
		spreadNames = append(spreadNames, "bench/"+t.id+"/distinct-keys")
		at = append(at, i)
	}
	// around adds what each turn of locker k cost the servers behind its
	// target to the sum that pick chooses of the target's.
	around := func(pick func(*opened) *usage) func(k int) func() {
		return func(k int) func() {
			o := open[at[k]]
			before := readUsage(ctx, o.procs, o.pids, true)
			return func() { pick(o).add(before, readUsage(ctx, o.procs, o.pids, false), o.scrape) }
		}
	}
	results, errs := workload.UncontendedTurns(ctx, lks, names, cfg.budget, turn,
		around(func(o *opened) *usage { return &o.spent }))
	spread, spreadErrs := workload.DistinctKeysTurns(ctx, lks, spreadNames, cfg.lockers, cfg.budget, cfg.distinctTurn, cfg.distinctWarm,
		around(func(o *opened) *usage { return &o.spread }))
	for k, i := range at {
		o := open[i]
		contended, contendedCost, contendedErr := runContended(ctx, cfg, order[i], srv, o.lk)
		o.close()
		open[i] = nil
		rows[i].Results = []workload.Result{results[k], spread[k], contended}
		rows[i].Costs = []cost{o.spent.cost(results[k].Ops), o.spread.cost(spread[k].Ops), contendedCost}
		var failed []string
		for w, err := range []error{errs[k], spreadErrs[k], contendedErr} {
			if err != nil {
				failed = append(failed, workloads[w]+": "+err.Error())
			}
		}
		rows[i].Err = strings.Join(failed, "\n")
	}
	return rows
}

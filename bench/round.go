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
	var names []string
	var at []int // the index in order of each locker
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
		at = append(at, i)
	}
	results, errs := workload.UncontendedTurns(ctx, lks, names, cfg.budget, turn, func(k int) func() {
		o := open[at[k]]
		before := readUsage(ctx, o.procs, o.pids, true)
		return func() { o.spent.add(before, readUsage(ctx, o.procs, o.pids, false), o.scrape) }
	})
	for k := range names {
		names[k] = strings.TrimSuffix(names[k], "/uncontended") + "/distinct-keys"
	}
	spread, spreadErrs := workload.DistinctKeysTurns(ctx, lks, names, cfg.lockers, cfg.budget, cfg.distinctTurn, cfg.distinctWarm, func(k int) func() {
		o := open[at[k]]
		before := readUsage(ctx, o.procs, o.pids, true)
		return func() { o.spread.add(before, readUsage(ctx, o.procs, o.pids, false), o.scrape) }
	})
	for k, i := range at {
		o := open[i]
		rows[i].Results = []workload.Result{results[k], spread[k]}
		rows[i].Costs = []cost{
			per(usage{dlmOK: o.spent.dlmOK, storeOK: o.spent.storeOK}, o.spent, results[k].Ops),
			per(usage{dlmOK: o.spread.dlmOK, storeOK: o.spread.storeOK}, o.spread, spread[k].Ops),
		}
		var failed []string
		if errs[k] != nil {
			failed = append(failed, "uncontended: "+errs[k].Error())
		}
		if spreadErrs[k] != nil {
			failed = append(failed, "distinct-keys: "+spreadErrs[k].Error())
		}
		rows[i].Err = strings.Join(failed, "\n")
		rows[i] = runTarget(ctx, cfg, order[i], srv, o.lk, rows[i])
		o.close()
		open[i] = nil
	}
	return rows
}

package main

import (
	"context"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
)

// turn is how long one target runs uncontended cycles before the next one
// takes over (see runRound).
const turn = 100 * time.Millisecond

// opened is a target of a round, open.
type opened struct {
	lk     workload.Locker
	close  func()
	procs  []*testenv.DLM
	pids   []int
	spent  usage   // what its turns cost the servers, summed
	scrape float64 // see scrapeAllocs
}

// runRound runs one round of the targets in order. It opens them all, runs
// the uncontended workload on them in turns of 100 ms (in a random order
// each sweep, see workload.UncontendedTurns), so that an
// uncontended cycle's time, which a shared machine's drift moves by tens
// of percent within seconds, compares the targets at the same moments; then
// runs the other workloads on each target in turn, one at a time, and
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
	for k, i := range at {
		o := open[i]
		rows[i].Results = []workload.Result{results[k]}
		rows[i].Costs = []cost{per(usage{dlmOK: o.spent.dlmOK, storeOK: o.spent.storeOK}, o.spent, results[k].Ops)}
		if errs[k] != nil {
			rows[i].Err = "uncontended: " + errs[k].Error()
		}
		rows[i] = runTarget(ctx, cfg, order[i], srv, o.lk, rows[i])
		o.close()
		open[i] = nil
	}
	return rows
}

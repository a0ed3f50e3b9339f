package workload

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DistinctKeysTurns runs DistinctKeys on several lockers in turns, as
// UncontendedTurns runs Uncontended: in a turn of locker i, lockers
// workers cycle, each on a resource of its own named names[i]/<w>; then
// they stop and the next locker takes over, every locker once per sweep,
// in a fresh random order each sweep, until each has spent the budget
// (Duration counts a locker's counted time, Ops its counted cycles).
//
// The first warm of each turn is not counted: the workers start, and a
// store wakes the connections that idled through the other lockers'
// turns, a cost that a run of a few seconds spreads thin and a short turn
// would not. The cycles that end within the next turn are counted, and
// the turn's Elapsed is that span. Cycles that straddle its start are
// counted and those that straddle its end are not, which on a steady load
// evens out.
//
// around, if not nil, is called when the counted span of a turn of locker
// i begins, and the function it returns when it ends. Results and errors
// are in the order of lks; a locker that fails leaves the turns with its
// error.
func DistinctKeysTurns(ctx context.Context, lks []Locker, names []string, lockers int, b Budget, turn, warm time.Duration, around func(i int) func()) ([]Result, []error) {
	res := make([]Result, len(lks))
	errs := make([]error, len(lks))
	err := b.check()
	if err == nil && (len(names) != len(lks) || turn <= 0 || warm < 0 || lockers < 1) {
		err = fmt.Errorf("workload: turns need a name per locker, a positive turn, no negative warm-up and a locker at least, got %d names for %d lockers, turn %s, warm-up %s, %d lockers", len(names), len(lks), turn, warm, lockers)
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	took := make([][]time.Duration, len(lks))
	fences := make([][]fence, len(lks))
	failed := make([]errCount, len(lks))
	for i, lk := range lks {
		res[i] = Result{Workload: "distinct-keys", Workers: lockers}
		fences[i] = make([]fence, lockers)
		errs[i] = prepare(ctx, lk, lockers)
	}
	done := func(i int) bool { return b.spent(errs[i], res[i].Elapsed, len(took[i])) }
	sweep(ctx, len(lks), done, func(i int) {
		t := distinctTurn{lk: lks[i], name: names[i], fences: fences[i]}
		samples, elapsed, ec, stopped := t.run(ctx, turn, warm, func() func() {
			if around == nil {
				return nil
			}
			return around(i)
		})
		took[i] = append(took[i], samples...)
		res[i].Elapsed += elapsed
		failed[i].n += ec.n
		failed[i].first = cmp.Or(failed[i].first, ec.first)
		if stopped != nil {
			errs[i] = stopped // stops its turns
		}
	})
	for i := range res {
		for f := range fences[i] {
			res[i].Violations += int(fences[i][f].violations.Load())
		}
		res[i].finish(took[i])
		if first := res[i].count(failed[i : i+1]); first != nil && !errors.Is(errs[i], first) {
			errs[i] = errors.Join(errs[i], first)
		}
		errs[i] = res[i].err(errors.Join(errs[i], ctxErr(ctx, done(i))))
	}
	return res, errs
}

// distinctTurn is one turn of one locker in DistinctKeysTurns.
type distinctTurn struct {
	lk     Locker
	name   string
	fences []fence // one per worker
}

// run runs the turn: the workers cycle through the warm-up and the counted
// span, then stop. It returns the counted cycles' times, the counted span,
// the workers' failed cycles, and the error of the first worker that
// stopped (ctx ended, or too many failures), which ends the turn and the
// locker's turns. begin is called as the counted span begins, and what it
// returns, if not nil, as the span ends.
func (t distinctTurn) run(ctx context.Context, turn, warm time.Duration, begin func() func()) ([]time.Duration, time.Duration, errCount, error) {
	var (
		counting, stop atomic.Bool
		mu             sync.Mutex
		samples        []time.Duration
		errs           errCount
		stopped        error
		failed         = make(chan struct{})
		once           sync.Once
		wg             sync.WaitGroup
	)
	for w := range t.fences {
		key := fmt.Sprintf("%s/%d", t.name, w)
		wg.Go(func() {
			var mine []time.Duration
			var ec errCount
			defer func() {
				mu.Lock()
				samples = append(samples, mine...)
				errs.n += ec.n
				errs.first = cmp.Or(errs.first, ec.first)
				mu.Unlock()
			}()
			for !stop.Load() {
				t0 := time.Now()
				if err := cycle(ctx, t.lk, w, key, &t.fences[w], nil); err != nil {
					if ec.failed(ctx, err) {
						once.Do(func() { stopped = err; close(failed) })
						return
					}
					continue
				}
				if counting.Load() {
					mine = append(mine, time.Since(t0))
				}
			}
		})
	}
	// wait waits for d, a worker's failure or ctx, whichever comes first.
	wait := func(d time.Duration) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-failed:
		case <-ctx.Done():
		}
	}
	wait(warm)
	end := begin()
	counting.Store(true)
	start := time.Now()
	wait(turn)
	counting.Store(false)
	elapsed := time.Since(start)
	if end != nil {
		end()
	}
	stop.Store(true)
	wg.Wait()
	return samples, elapsed, errs, stopped
}

package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// UncontendedTurns runs Uncontended on several lockers in turns: each runs
// cycles for turn, then the next takes over, every locker once per sweep,
// sweep after sweep until each has spent the budget (Duration counts a
// locker's own turns, Ops its own cycles). A drift in the machine's speed,
// which on a shared machine moves a cycle's time by tens of percent within
// seconds, then falls on every locker alike; runs one after the other
// compare the lockers at different moments instead. Each sweep visits the
// lockers in a fresh random order, so that what one turn leaves behind (a
// server's background work after a burst) does not always fall on the
// same next locker. Each turn runs at least one cycle. lks[i] cycles on
// names[i].
//
// around, if not nil, is called before each turn of locker i, and the
// function it returns right after that turn: a caller reads there what a
// turn cost (the servers' CPU time). Results and errors are in the order
// of lks; a locker that fails leaves the turns with its error, and its
// result holds the cycles before.
func UncontendedTurns(ctx context.Context, lks []Locker, names []string, b Budget, turn time.Duration, around func(i int) func()) ([]Result, []error) {
	res := make([]Result, len(lks))
	errs := make([]error, len(lks))
	err := b.check()
	if err == nil && (len(names) != len(lks) || turn <= 0) {
		err = fmt.Errorf("workload: turns need a name per locker and a positive turn, got %d names for %d lockers and %s", len(names), len(lks), turn)
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	took := make([][]time.Duration, len(lks))
	fences := make([]fence, len(lks))
	failed := make([]errCount, len(lks))
	for i, lk := range lks {
		res[i] = Result{Workload: "uncontended", Workers: 1}
		errs[i] = prepare(ctx, lk, 1)
	}
	done := func(i int) bool { return b.spent(errs[i], res[i].Elapsed, len(took[i])) }
	sweep(ctx, len(lks), done, func(i int) {
		var after func()
		if around != nil {
			after = around(i)
		}
		start := time.Now()
		for {
			t0 := time.Now()
			if err := cycle(ctx, lks[i], 0, names[i], &fences[i], nil); err == nil {
				took[i] = append(took[i], time.Since(t0))
			} else if failed[i].failed(ctx, err) {
				errs[i] = err // stops its turns
				break
			}
			if time.Since(start) >= turn || done(i) {
				break
			}
		}
		res[i].Elapsed += time.Since(start)
		if after != nil {
			after()
		}
	})
	for i := range res {
		res[i].Violations = int(fences[i].violations.Load())
		res[i].finish(took[i])
		if first := res[i].count(failed[i : i+1]); first != nil && !errors.Is(errs[i], first) {
			errs[i] = errors.Join(errs[i], first)
		}
		errs[i] = res[i].err(errors.Join(errs[i], ctxErr(ctx, done(i))))
	}
	return res, errs
}

// sweep gives n lockers turns, each once per sweep in a fresh random
// order, sweep after sweep until every one is done or ctx ends; turn(i)
// runs one turn of locker i.
func sweep(ctx context.Context, n int, done func(i int) bool, turn func(i int)) {
	left := 0
	for i := range n {
		if !done(i) {
			left++
		}
	}
	for left > 0 && ctx.Err() == nil {
		for _, i := range rand.Perm(n) {
			if done(i) || ctx.Err() != nil {
				continue
			}
			turn(i)
			if done(i) {
				left--
			}
		}
	}
}

// spent reports whether a locker taking turns is done: it failed (err),
// or its counted time or cycles reached the budget.
func (b Budget) spent(err error, elapsed time.Duration, ops int) bool {
	return err != nil || (b.Duration > 0 && elapsed >= b.Duration) || (b.Ops > 0 && ops >= b.Ops)
}

// ctxErr is ctx's error for a locker whose budget ctx cut short.
func ctxErr(ctx context.Context, finished bool) error {
	if finished {
		return nil
	}
	return ctx.Err()
}

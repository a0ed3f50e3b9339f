package workload_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/memory"
)

// counting is a Locker that counts its Lock calls, apart those made while
// a turn's counted span is open (after) from the others (before), and,
// with fail set, fails every call after its first fail.
type counting struct {
	workload.Locker
	fail          int64
	open          atomic.Bool
	before, after atomic.Int64
}

func (c *counting) Lock(ctx context.Context, w int, name string, wait bool) (workload.Unlock, error) {
	n := c.before.Add(0) + c.after.Add(0)
	if c.open.Load() {
		c.after.Add(1)
	} else {
		c.before.Add(1)
	}
	if c.fail > 0 && n >= c.fail {
		return nil, errBroken
	}
	return c.Locker.Lock(ctx, w, name, wait)
}

func newCounting(fail int64) *counting {
	return &counting{Locker: workload.Client(dlm.New(memory.New())), fail: fail}
}

func TestDistinctKeysTurns(t *testing.T) {
	lks := []*counting{newCounting(0), newCounting(0), newCounting(50)}
	log := turnLog{t: t, open: -1,
		begin: func(i int) { lks[i].open.Store(true) },
		end:   func(i int) { lks[i].open.Store(false) }}
	const workers = 4
	res, errs := workload.DistinctKeysTurns(t.Context(), []workload.Locker{lks[0], lks[1], lks[2]}, []string{"a", "b", "c"},
		workers, workload.Budget{Ops: 3000}, time.Millisecond, 500*time.Microsecond, log.around)
	turns := log.turns
	for i := range 2 {
		r := res[i]
		if errs[i] != nil || r.Ops < 3000 || r.Workload != "distinct-keys" || r.Workers != workers ||
			r.P50 <= 0 || r.Elapsed <= 0 || r.PerSecond <= 0 || r.Violations != 0 {
			t.Errorf("locker %d: %+v, %v", i, r, errs[i])
		}
		// The warm-up ran cycles, and none of them counted: every counted
		// cycle began in the counted span, or was in flight as it opened.
		if before, after := lks[i].before.Load(), lks[i].after.Load(); before == 0 || int64(r.Ops) > after+workers*int64(countOf(turns, i)) {
			t.Errorf("locker %d: %d cycles counted, %d calls in counted spans and %d outside over %d turns", i, r.Ops, after, before, countOf(turns, i))
		}
	}
	if !errors.Is(errs[2], errBroken) || res[2].Errors < 100 || res[2].Errors > workers*100 {
		t.Errorf("the broken locker: %+v, %v; want it to stop once a worker failed 100 times", res[2], errs[2])
	}
	if countOf(turns, 0) < 2 || countOf(turns, 1) < 2 {
		t.Errorf("turns %v: a locker ran its budget in one turn", turns)
	}
	// Every turn stops its workers before the next begins: none is left
	// once the turns return (but one may still be unwinding from its
	// last call).
	storetest.Await(t, 10*time.Second, "the workers to end", func() bool { return turnWorkers(t) == 0 })
}

// turnWorkers counts the goroutines that run a turn's workers.
func turnWorkers(t *testing.T) int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	if n == len(buf) {
		t.Fatal("the goroutines' stacks fill the buffer")
	}
	return strings.Count(string(buf[:n]), "workload.distinctTurn.run.func")
}

func countOf(turns []int, i int) (n int) {
	for _, k := range turns {
		if k == i {
			n++
		}
	}
	return n
}

func TestDistinctKeysTurnsDuration(t *testing.T) {
	lks := []workload.Locker{newCounting(0), newCounting(0)}
	res, errs := workload.DistinctKeysTurns(t.Context(), lks, []string{"a", "b"}, 2,
		workload.Budget{Duration: 20 * time.Millisecond}, 4*time.Millisecond, time.Millisecond, nil)
	for i, r := range res {
		if errs[i] != nil || r.Elapsed < 20*time.Millisecond || r.Ops == 0 {
			t.Errorf("locker %d: %+v, %v", i, r, errs[i])
		}
	}
}

func TestDistinctKeysTurnsStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	lk := newCounting(0)
	res, errs := workload.DistinctKeysTurns(ctx, []workload.Locker{lk}, []string{"a"}, 2,
		workload.Budget{Duration: time.Hour}, time.Hour, 0, func(int) func() { cancel(); return nil })
	if !errors.Is(errs[0], context.Canceled) || res[0].Elapsed >= time.Hour {
		t.Errorf("a cancelled run: %+v, %v", res[0], errs[0])
	}
}

func TestDistinctKeysTurnsBadInput(t *testing.T) {
	lk := []workload.Locker{newCounting(0)}
	for _, c := range []struct {
		name       string
		names      []string
		lockers    int
		b          workload.Budget
		turn, warm time.Duration
	}{
		{"an empty budget", []string{"a"}, 2, workload.Budget{}, time.Millisecond, 0},
		{"lockers without names", nil, 2, workload.Budget{Ops: 1}, time.Millisecond, 0},
		{"a zero turn", []string{"a"}, 2, workload.Budget{Ops: 1}, 0, 0},
		{"a negative warm-up", []string{"a"}, 2, workload.Budget{Ops: 1}, time.Millisecond, -time.Millisecond},
		{"no workers", []string{"a"}, 0, workload.Budget{Ops: 1}, time.Millisecond, 0},
	} {
		if _, errs := workload.DistinctKeysTurns(t.Context(), lk, c.names, c.lockers, c.b, c.turn, c.warm, nil); errs[0] == nil {
			t.Errorf("%s was accepted", c.name)
		}
	}
}

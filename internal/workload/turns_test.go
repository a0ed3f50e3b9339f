package workload_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/memory"
)

// failAfter is a Locker that fails every Lock after its first n.
type failAfter struct {
	workload.Locker
	n, calls int
}

var errBroken = errors.New("broken")

func (f *failAfter) Lock(ctx context.Context, w int, name string, wait bool) (workload.Unlock, error) {
	f.calls++
	if f.n == 0 {
		return nil, errBroken
	}
	f.n--
	return f.Locker.Lock(ctx, w, name, wait)
}

// turnLog records the order of the turns through their around callback,
// and fails the test if one turn begins inside another. begin and end, if
// set, run as a turn of locker i begins and ends.
type turnLog struct {
	t          *testing.T
	open       int // the locker whose turn runs, or -1
	turns      []int
	begin, end func(i int)
}

func (l *turnLog) around(i int) func() {
	if l.open >= 0 {
		l.t.Errorf("turn of %d began inside the turn of %d", i, l.open)
	}
	l.open = i
	l.turns = append(l.turns, i)
	if l.begin != nil {
		l.begin(i)
	}
	return func() {
		if l.end != nil {
			l.end(i)
		}
		l.open = -1
	}
}

func TestUncontendedTurns(t *testing.T) {
	broken := &failAfter{Locker: workload.Client(dlm.New(memory.New())), n: 5}
	lks := []workload.Locker{workload.Client(dlm.New(memory.New())), workload.Client(dlm.New(memory.New())), broken}
	log := turnLog{t: t, open: -1}
	res, errs := workload.UncontendedTurns(t.Context(), lks, []string{"a", "b", "c"},
		workload.Budget{Ops: 300}, 100*time.Microsecond, log.around)
	turns := log.turns
	for i := range 2 {
		r := res[i]
		if errs[i] != nil || r.Ops != 300 || r.Workload != "uncontended" || r.P50 <= 0 || r.Elapsed <= 0 || r.PerSecond <= 0 {
			t.Errorf("locker %d: %+v, %v", i, r, errs[i])
		}
	}
	// The broken locker's failures are counted as it goes on, up to the
	// bound past which it stops.
	if !errors.Is(errs[2], errBroken) || res[2].Ops != 5 || res[2].Errors != 100 {
		t.Errorf("the broken locker: %+v, %v; want 5 cycles and 100 errors", res[2], errs[2])
	}
	// Every sweep gives each locker with cycles left one turn: the turn
	// counts of the lockers not yet done never differ by more than one.
	counts := make([]int, 3)
	for k, i := range turns {
		counts[i]++
		for j := range 2 {
			if slices.Contains(turns[k+1:], j) && slices.Contains(turns[k+1:], 1-j) && counts[j] > counts[1-j]+1 {
				t.Fatalf("turns %v: locker %d ran %d turns to the other's %d while both had cycles left", turns, j, counts[j], counts[1-j])
			}
		}
	}
	if counts[0] < 2 || counts[1] < 2 {
		t.Fatalf("turns %v: turns of 100µs ran 300 cycles at once", turns)
	}
	// The broken locker left after the turn in which it failed the 100th
	// time.
	if !slices.Contains(turns[:3], 2) || broken.calls != 105 {
		t.Errorf("turns %v, %d calls of the broken locker: it had no turn in the first sweep, or it kept its turns", turns, broken.calls)
	}
}

func TestUncontendedTurnsDuration(t *testing.T) {
	lks := []workload.Locker{workload.Client(dlm.New(memory.New())), workload.Client(dlm.New(memory.New()))}
	counts := make([]int, 2)
	res, errs := workload.UncontendedTurns(t.Context(), lks, []string{"a", "b"},
		workload.Budget{Duration: 20 * time.Millisecond}, 2*time.Millisecond,
		func(i int) func() { counts[i]++; return func() {} })
	for i, r := range res {
		if errs[i] != nil || r.Elapsed < 20*time.Millisecond || r.Ops == 0 {
			t.Errorf("locker %d: %+v, %v", i, r, errs[i])
		}
		if counts[i] < 2 {
			t.Errorf("locker %d had %d turns for a 20ms budget of 2ms turns", i, counts[i])
		}
	}
}

func TestUncontendedTurnsBadInput(t *testing.T) {
	lk := []workload.Locker{workload.Client(dlm.New(memory.New()))}
	if _, errs := workload.UncontendedTurns(t.Context(), lk, []string{"a"}, workload.Budget{}, time.Millisecond, nil); errs[0] == nil {
		t.Error("an empty budget was accepted")
	}
	if _, errs := workload.UncontendedTurns(t.Context(), lk, nil, workload.Budget{Ops: 1}, time.Millisecond, nil); errs[0] == nil {
		t.Error("lockers without names were accepted")
	}
	if _, errs := workload.UncontendedTurns(t.Context(), lk, []string{"a"}, workload.Budget{Ops: 1}, 0, nil); errs[0] == nil {
		t.Error("a zero turn was accepted")
	}
}

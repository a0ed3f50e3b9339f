// Package workload runs dlm's standard benchmark workloads against any
// Locker (a *dlm.Client through Client, or another lock library through an
// adapter of the comparison module) and measures them: uncontended acquire+release, many lockers on
// distinct keys, and waiters taking turns on one key. Every workload checks
// mutual exclusion as it goes (all lockers run in this process, so a shared
// counter per resource sees any overlap).
//
// The store benchmarks (go test -bench), `dlm bench` and the comparison
// module under bench/ all run these same functions, so their figures agree.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the standard workloads.
const (
	// Lockers is the number of lockers of DistinctKeys.
	Lockers = 64
	// Waiters is the number of waiters of Contended.
	Waiters = 8
	// Hold is how long each Contended acquisition holds the lock.
	Hold = time.Millisecond
)

// Budget bounds a workload: it stops after Ops operations or after
// Duration, whichever comes first. A zero field is no bound; at least one
// must be set.
type Budget struct {
	Ops      int
	Duration time.Duration
}

func (b Budget) check() error {
	if b.Ops < 0 || b.Duration < 0 || (b.Ops == 0 && b.Duration == 0) {
		return fmt.Errorf("workload: a budget needs a positive Ops or Duration, got %+v", b)
	}
	return nil
}

// Result is what one workload measured.
type Result struct {
	// Workload names the workload: "uncontended", "distinct-keys" or
	// "contended".
	Workload string `json:"workload"`
	// Workers is the number of concurrent lockers.
	Workers int `json:"workers"`
	// Ops is the number of completed acquire+release cycles.
	Ops int `json:"ops"`
	// Elapsed is the wall time of the run.
	Elapsed time.Duration `json:"elapsed_ns"`
	// PerSecond is Ops / Elapsed.
	PerSecond float64 `json:"per_second"`
	// P50 and P99 are percentiles of one acquire+release (uncontended,
	// distinct keys) or of the handoff gap from a release to the next
	// grant (contended).
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	// Jain is Jain's fairness index over the workers' acquisition counts
	// (1 is perfectly fair); contended only.
	Jain float64 `json:"jain,omitempty"`
	// MaxWait is the longest single wait for the lock; contended only.
	MaxWait time.Duration `json:"max_wait_ns,omitempty"`
	// Violations counts moments when two lockers were inside the same
	// critical section. It must be 0.
	Violations int `json:"violations"`
	// Errors counts the cycles that failed (an acquisition or a release
	// that returned an error, contention included where nobody else wants
	// the lock) other than by the run's context ending. A worker goes on
	// after an error, up to maxErrors of them. A run with errors is not a
	// clean run, whatever its violations.
	Errors int `json:"errors"`
}

// maxErrors is how many failed cycles stop a worker: a target that fails
// every call would otherwise spin through its budget.
const maxErrors = 100

// errCount counts a worker's failed cycles and keeps the first error, and
// the context's error that stopped it, if any.
type errCount struct {
	n           int
	first, stop error
}

// failed records err, a cycle's failure under ctx, and reports whether the
// worker stops: ctx ended (not counted), or too many cycles failed.
func (e *errCount) failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		e.stop = err
		return true
	}
	e.n++
	if e.first == nil {
		e.first = err
	}
	return e.n >= maxErrors
}

// err is what e stands for: its first failure and what stopped it.
func (e errCount) err() error { return errors.Join(e.first, e.stop) }

// ErrViolation is returned, wrapped, when a workload saw two lockers in one
// critical section.
var ErrViolation = errors.New("workload: mutual exclusion violated")

// fence counts the lockers inside one critical section.
type fence struct{ inside, violations atomic.Int32 }

func (f *fence) enter() {
	if f.inside.Add(1) != 1 {
		f.violations.Add(1)
	}
}

func (f *fence) leave() { f.inside.Add(-1) }

// counter hands out operations until the budget is spent.
type counter struct {
	left     atomic.Int64
	deadline time.Time
}

func newCounter(b Budget) *counter {
	c := &counter{}
	c.left.Store(math.MaxInt64)
	if b.Ops > 0 {
		c.left.Store(int64(b.Ops))
	}
	if b.Duration > 0 {
		c.deadline = time.Now().Add(b.Duration)
	}
	return c
}

// next reports whether one more operation may start.
func (c *counter) next() bool {
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return false
	}
	return c.left.Add(-1) >= 0
}

// cycle acquires name without waiting, runs inside with the lock held,
// and releases it.
func cycle(ctx context.Context, lk Locker, w int, name string, f *fence, inside func()) error {
	unlock, err := lk.Lock(ctx, w, name, false)
	if err != nil {
		return err
	}
	f.enter()
	if inside != nil {
		inside()
	}
	f.leave()
	return release(ctx, unlock)
}

// releaseTimeout bounds a release made after the run's context ended.
const releaseTimeout = 5 * time.Second

// release releases l even when ctx has ended, within releaseTimeout: a run
// stopped midway (dlm bench interrupted) must not leave its locks held
// until their TTL, where the next run would find them taken.
func release(ctx context.Context, unlock Unlock) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return unlock(ctx)
}

// prepare gives lk the chance to set up its workers before the clock runs.
func prepare(ctx context.Context, lk Locker, workers int) error {
	if p, ok := lk.(Preparer); ok {
		return p.Prepare(ctx, workers)
	}
	return nil
}

// Uncontended acquires (without waiting) and releases one resource nobody
// else wants, one cycle at a time. P50 and P99 are those of one cycle.
func Uncontended(ctx context.Context, lk Locker, name string, b Budget) (Result, error) {
	return DistinctKeys(ctx, lk, name, 1, b)
}

// DistinctKeys runs lockers concurrent lockers, each acquiring (without
// waiting) and releasing a resource of its own named name/<i>: the store's
// throughput without contention. P50 and P99 are those of one cycle.
func DistinctKeys(ctx context.Context, lk Locker, name string, lockers int, b Budget) (Result, error) {
	if err := b.check(); err != nil {
		return Result{}, err
	}
	if lockers < 1 {
		return Result{}, fmt.Errorf("workload: lockers must be at least 1, got %d", lockers)
	}
	res := Result{Workload: "distinct-keys", Workers: lockers}
	if lockers == 1 {
		res.Workload = "uncontended"
	}
	if err := prepare(ctx, lk, lockers); err != nil {
		return res, err
	}
	budget := newCounter(b)
	took := make([][]time.Duration, lockers)
	fences := make([]fence, lockers)
	errs := make([]errCount, lockers)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range lockers {
		key := name
		if lockers > 1 {
			key = fmt.Sprintf("%s/%d", name, i)
		}
		wg.Go(func() {
			for budget.next() {
				t0 := time.Now()
				if err := cycle(ctx, lk, i, key, &fences[i], nil); err != nil {
					if errs[i].failed(ctx, err) {
						return
					}
					continue
				}
				took[i] = append(took[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	all := slices.Concat(took...)
	for i := range fences {
		res.Violations += int(fences[i].violations.Load())
	}
	res.finish(all)
	return res, res.err(res.count(errs))
}

// Contended runs waiters lockers taking turns on the resource name, each
// holding it for hold per acquisition. P50 and P99 are
// those of the handoff gap from a release to the next grant; Jain and
// MaxWait say how fairly and how long they waited.
func Contended(ctx context.Context, lk Locker, name string, waiters int, hold time.Duration, b Budget) (Result, error) {
	if err := b.check(); err != nil {
		return Result{}, err
	}
	if waiters < 1 {
		return Result{}, fmt.Errorf("workload: waiters must be at least 1, got %d", waiters)
	}
	res := Result{Workload: "contended", Workers: waiters}
	if err := prepare(ctx, lk, waiters); err != nil {
		return res, err
	}
	var (
		f           fence
		mu          sync.Mutex
		lastRelease time.Time
		gaps        []time.Duration
	)
	budget := newCounter(b)
	counts := make([]int, waiters)
	errs := make([]errCount, waiters)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range waiters {
		wg.Go(func() {
			for budget.next() {
				asked := time.Now()
				unlock, err := lk.Lock(ctx, w, name, true)
				if err != nil {
					if errs[w].failed(ctx, err) {
						return
					}
					continue
				}
				got := time.Now()
				f.enter()
				mu.Lock()
				if !lastRelease.IsZero() {
					gaps = append(gaps, got.Sub(lastRelease))
				}
				res.MaxWait = max(res.MaxWait, got.Sub(asked))
				counts[w]++
				mu.Unlock()
				work(hold) // the critical section
				f.leave()
				mu.Lock()
				lastRelease = time.Now()
				mu.Unlock()
				if err := release(ctx, unlock); err != nil && errs[w].failed(ctx, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Violations = int(f.violations.Load())
	res.finish(gaps)
	res.Ops = 0
	for _, n := range counts {
		res.Ops += n
	}
	res.PerSecond = float64(res.Ops) / res.Elapsed.Seconds()
	if j := Jain(counts); !math.IsNaN(j) {
		res.Jain = j
	}
	return res, res.err(res.count(errs))
}

// finish sets Ops, PerSecond and the percentiles from samples.
func (r *Result) finish(samples []time.Duration) {
	slices.Sort(samples)
	r.Ops = len(samples)
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Ops) / r.Elapsed.Seconds()
	}
	if n := len(samples); n > 0 {
		r.P50 = samples[n/2]
		r.P99 = samples[n*99/100]
	}
}

// count adds the workers' failed cycles to r.Errors and returns their
// first errors, joined.
func (r *Result) count(workers []errCount) error {
	var errs []error
	for _, w := range workers {
		r.Errors += w.n
		errs = append(errs, w.err())
	}
	return errors.Join(errs...)
}

// err joins a violation with the lockers' errors.
func (r *Result) err(lockers error) error {
	if r.Violations > 0 {
		return errors.Join(fmt.Errorf("%w: %d times in %s", ErrViolation, r.Violations, r.Workload), lockers)
	}
	return lockers
}

// Jain is Jain's fairness index of counts: 1 when every worker got the same
// share, 1/n when one got everything, NaN when nobody got anything.
func Jain(counts []int) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(len(counts)) * sq)
}

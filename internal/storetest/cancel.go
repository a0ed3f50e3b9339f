package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// Cancels is what Cancellation runs.
type Cancels struct {
	// Workers is how many goroutines share the client under test, each on
	// a resource of its own (64 when zero).
	Workers int
	// For is how long they run (2 s when zero); each also stops after
	// 400 rounds.
	For time.Duration
	// MaxCancel bounds the random moment at which a call's context ends:
	// anywhere from 0 to it, so that it ends before the call is sent, while
	// it is on the wire, as it is answered, and after. When zero it is
	// three times the median acquisition measured first (as many
	// goroutines acquiring at once),
	// so that the moments spread around the grant on a fast store and a
	// slow one, on a quiet machine and a busy one.
	MaxCancel time.Duration
	// Convert, Semaphores and Elections also run conversions, semaphore
	// acquisitions and campaigns, for the stores that have them.
	Convert, Semaphores, Elections bool
}

// Cancellation is the scenario of calls whose contexts end at random points:
// workers share one client c (one session, where the store has sessions),
// each looping on a resource of its own. Each round acquires (alone, as an
// Owner's, as a one-permit semaphore or by a campaign, in turn) with a
// context that ends at a random moment, then, holding, extends, converts
// and observes on such contexts, and releases, on such a context first and
// then on one that does not end. A second client, checker, judges every
// step from outside:
//
//   - while a lease claims the lock, a try-lock (WithWait(0)) of the same
//     resource is refused: a grant to the checker while a lease that was
//     not lost claims it is two holders;
//   - a release of a held lease succeeds (a release cut short by its
//     context may fail, and is then made again): a refused release means
//     the store let the lock go behind the lease's back;
//   - once Release returned nil, the checker's try-lock is granted at
//     once: a release that returned is done (linearizable);
//   - an Acquire that failed left nothing held: the checker is granted the
//     resource well within its TTL.
//
// The TTL is long enough (a minute) that nothing expires on its own during
// the run, and nothing else injects a fault: every count must be zero. It
// returns after logging the counts.
func Cancellation(t *testing.T, c, checker *dlm.Client, opt Cancels) {
	t.Helper()
	if opt.Workers == 0 {
		opt.Workers = 64
	}
	if opt.For == 0 {
		opt.For = 2 * time.Second
	}
	if opt.MaxCancel == 0 {
		opt.MaxCancel = 3 * medianAcquire(t, c, opt.Workers)
	}
	run := &cancelRun{t: t, c: c, checker: checker, opt: opt, end: time.Now().Add(opt.For)}
	var wg sync.WaitGroup
	for w := range opt.Workers {
		name := Resource(t)
		wg.Go(func() { run.worker(w, name) })
	}
	wg.Wait()
	t.Logf("contexts ending within %s; %d rounds: %d grants, %d acquisitions ended by their context, %d calls cut short; "+
		"violations: %d grants to the checker while held, %d releases of held leases refused, "+
		"%d locks not free after a release returned, %d locks left held by a failed acquisition, %d other errors",
		opt.MaxCancel, run.rounds.Load(), run.grants.Load(), run.cancelled.Load(), run.cut.Load(),
		run.doubleGrants.Load(), run.refusedReleases.Load(), run.notFree.Load(), run.leaked.Load(), run.errs.Load())
	run.mu.Lock()
	defer run.mu.Unlock()
	for _, v := range run.first {
		t.Error(v)
	}
}

const (
	cancelTTL     = time.Minute
	cancelRounds  = 400
	cancelMaxLogs = 8
	// cancelLeakWait is how long the checker waits for a resource that a
	// failed acquisition may still be giving back: far less than the TTL,
	// far more than the store takes on a loaded machine.
	cancelLeakWait = 20 * time.Second
)

type cancelRun struct {
	t          *testing.T
	c, checker *dlm.Client
	opt        Cancels
	end        time.Time

	rounds, grants, cancelled, cut                       atomic.Int64
	doubleGrants, refusedReleases, notFree, leaked, errs atomic.Int64
	mu                                                   sync.Mutex
	first                                                []string
}

// violation counts one and keeps the first few messages.
func (r *cancelRun) violation(n *atomic.Int64, format string, args ...any) {
	n.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.first) < cancelMaxLogs {
		r.first = append(r.first, fmt.Sprintf(format, args...))
	}
}

// soon returns a context that ends at a random moment within MaxCancel.
func (r *cancelRun) soon() (context.Context, context.CancelFunc) {
	d := rand.N(r.opt.MaxCancel + 1)
	if rand.N(2) == 0 {
		return context.WithTimeout(context.Background(), d) // a deadline
	}
	ctx, cancel := context.WithCancel(context.Background()) // a cancellation
	stop := time.AfterFunc(d, cancel)
	return ctx, func() { stop.Stop(); cancel() }
}

// holder is what a round holds: a lease, or a leadership.
type holder struct {
	lease *dlm.Lease
	lead  *dlm.Leadership
}

func (h holder) release(ctx context.Context) error {
	if h.lead != nil {
		return h.lead.Resign(ctx)
	}
	return h.lease.Release(ctx)
}

func (r *cancelRun) worker(w int, name string) {
	for i := 0; i < cancelRounds && time.Now().Before(r.end) && !r.t.Failed(); i++ {
		r.rounds.Add(1)
		r.round(w, i, name)
	}
}

// round is one acquisition of name and what follows it.
func (r *cancelRun) round(w, i int, name string) {
	kind := i % 4
	switch {
	case kind == 1 && !r.opt.Semaphores:
		kind = 0
	case kind == 3 && !r.opt.Elections:
		kind = 2
	}
	ctx, cancel := r.soon()
	h, err := r.acquire(ctx, kind, w, name)
	cancel()
	if err != nil {
		r.failed(name, kind, err)
		return
	}
	r.grants.Add(1)
	r.judgeHeld(name, h, "after the grant")

	// Calls cut short while holding: none may end the hold.
	r.cutCall(name, "Extend", h.lease.Extend)
	if r.opt.Convert && (kind == 0 || kind == 2) {
		r.cutCall(name, "Convert to PR", func(ctx context.Context) error { return h.lease.Convert(ctx, dlm.PR) })
		r.judgeHeld(name, h, "after a conversion to PR")
		r.cutCall(name, "Convert to EX", func(ctx context.Context) error { return h.lease.Convert(ctx, dlm.EX) })
		r.judgeHeld(name, h, "after a conversion back to EX")
	}
	if h.lead != nil {
		ctx, cancel = r.soon()
		for range h.lead.Election().Observe(ctx) {
		}
		cancel()
	}

	// The release: in every other round on a context that ends at random
	// first, and then, if that did not finish it, on one that does not.
	released := (i/4)%2 == 1 && r.cutCall(name, "Release", h.release)
	if !released {
		if err := h.release(context.Background()); err != nil {
			r.violation(&r.refusedReleases, "%s: the release of a held lease (token %d) failed: %v", name, h.lease.Token(), err)
			return
		}
	}
	// A release that returned is done: the lock is free for anyone.
	l, err := r.checker.Acquire(context.Background(), r.checkName(name, kind), r.checkOpts(kind, 0)...)
	if err != nil {
		r.violation(&r.notFree, "%s: a try-lock right after a release returned was refused: %v", name, err)
		return
	}
	r.release(l)
}

// acquire makes one acquisition of the round's kind.
func (r *cancelRun) acquire(ctx context.Context, kind, w int, name string) (holder, error) {
	opts := []dlm.Option{dlm.WithTTL(cancelTTL), dlm.WithWait(5 * time.Second)}
	switch kind {
	case 1:
		l, err := r.c.Acquire(ctx, r.checkName(name, kind), append(opts, dlm.WithSemaphore(1, 1))...)
		return holder{lease: l}, err
	case 2:
		l, err := r.c.Owner().Acquire(ctx, name, opts...)
		return holder{lease: l}, err
	case 3:
		ld, err := r.c.Election(r.checkName(name, kind), opts...).Campaign(ctx, fmt.Sprintf("worker-%d", w))
		if err != nil {
			return holder{}, err
		}
		return holder{lease: ld.Lease(), lead: ld}, nil
	}
	l, err := r.c.Acquire(ctx, name, opts...)
	return holder{lease: l}, err
}

// checkName is the resource of a round of kind: the worker's name for
// locks, its own for the semaphore and the election (a resource is one
// kind at a time).
func (r *cancelRun) checkName(name string, kind int) string {
	switch kind {
	case 1:
		return name + "/semaphore"
	case 3:
		return name + "/election"
	}
	return name
}

// medianAcquire returns the median time c takes to acquire a fresh
// resource while workers goroutines do the same, 5 times each (every lease
// released).
func medianAcquire(t *testing.T, c *dlm.Client, workers int) time.Duration {
	t.Helper()
	ctx := Context(t)
	var mu sync.Mutex
	var took []time.Duration
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			name := Resource(t)
			for range 5 {
				start := time.Now()
				l, err := c.Acquire(ctx, name)
				d := time.Since(start)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				took = append(took, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(took)
	t.Logf("an acquisition takes %s among %d acquiring (median of %d)", took[len(took)/2], workers, len(took))
	return took[len(took)/2]
}

// checkOpts are the checker's options: a wait, and the kind's shape.
func (r *cancelRun) checkOpts(kind int, wait time.Duration) []dlm.Option {
	opts := []dlm.Option{dlm.WithTTL(cancelTTL), dlm.WithWait(wait)}
	if kind == 1 {
		opts = append(opts, dlm.WithSemaphore(1, 1))
	}
	return opts
}

// judgeHeld checks, while h claims the lock, that the checker cannot take
// it.
func (r *cancelRun) judgeHeld(name string, h holder, when string) {
	kind := 0
	if h.lead != nil {
		kind = 3
	} else if h.lease.Permits() > 0 {
		kind = 1
	}
	l, err := r.checker.Acquire(context.Background(), r.checkName(name, kind), r.checkOpts(kind, 0)...)
	switch {
	case err == nil:
		select {
		case <-h.lease.Lost():
			r.violation(&r.errs, "%s: the lease was lost %s without a fault: %v", name, when, h.lease.Err())
		default:
			r.violation(&r.doubleGrants, "%s: the checker was granted token %d %s while the lease of token %d claimed it",
				name, l.Token(), when, h.lease.Token())
		}
		r.release(l)
	case !errors.Is(err, dlm.ErrNotAcquired):
		r.violation(&r.errs, "%s: the checker's try-lock %s: %v", name, when, err)
	}
}

// failed judges an acquisition that returned an error: its context ended,
// and it must have left nothing held.
func (r *cancelRun) failed(name string, kind int, err error) {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		r.violation(&r.errs, "%s: an acquisition failed with no context ended: %v", name, err)
		return
	}
	r.cancelled.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), cancelLeakWait)
	defer cancel()
	l, cerr := r.checker.Acquire(ctx, r.checkName(name, kind), r.checkOpts(kind, cancelLeakWait)...)
	if cerr != nil {
		r.violation(&r.leaked, "%s: after an acquisition ended by its context (%v), the checker was not granted the lock within %s: %v",
			name, err, cancelLeakWait, cerr)
		return
	}
	r.release(l)
}

// cutCall makes a call made while holding on a context that ends at
// random, and reports whether it succeeded. Only its context may make it
// fail, and the failure must not end the hold.
func (r *cancelRun) cutCall(name, call string, fn func(context.Context) error) bool {
	ctx, cancel := r.soon()
	defer cancel()
	err := fn(ctx)
	if err == nil {
		return true
	}
	live := ctx.Err() == nil
	r.cut.Add(1)
	switch {
	case errors.Is(err, dlm.ErrLost), errors.Is(err, dlm.ErrNotHeld):
		r.violation(&r.refusedReleases, "%s: %s cut short by its context ended the hold: %v", name, call, err)
	case live:
		r.violation(&r.errs, "%s: %s failed with its context still live: %v", name, call, err)
	}
	return false
}

// release releases a checker's lease.
func (r *cancelRun) release(l *dlm.Lease) {
	if err := l.Release(context.Background()); err != nil {
		r.violation(&r.errs, "%s: the checker's release: %v", l.Resource(), err)
	}
}

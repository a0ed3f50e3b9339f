package workload_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/memory"
	"github.com/dlmhq/dlm/redis"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   float64
	}{
		{[]int{5, 5, 5, 5}, 1},
		{[]int{8, 0, 0, 0}, 0.25},
		{[]int{1, 3}, 0.8},
	} {
		if got := workload.Jain(tc.counts); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
	if got := workload.Jain([]int{0, 0}); !math.IsNaN(got) {
		t.Errorf("Jain of no acquisitions = %v, want NaN", got)
	}
}

func TestWorkloadsOnMemory(t *testing.T) {
	ctx := t.Context()
	c := dlm.New(memory.New())
	u, err := workload.Uncontended(ctx, workload.Client(c), "u", workload.Budget{Ops: 200})
	if err != nil || u.Ops != 200 || u.P50 <= 0 || u.P99 < u.P50 || u.Violations != 0 {
		t.Fatalf("uncontended: %+v, %v", u, err)
	}
	d, err := workload.DistinctKeys(ctx, workload.Client(c), "d", 16, workload.Budget{Ops: 800})
	if err != nil || d.Ops != 800 || d.Workers != 16 || d.PerSecond <= 0 {
		t.Fatalf("distinct keys: %+v, %v", d, err)
	}
	// Turns long enough, and enough of them, that a worker a loaded machine
	// starts late (by a few hundred ms) misses few of its turns.
	k, err := workload.Contended(ctx, workload.Client(c), "k", 4, 2*time.Millisecond, workload.Budget{Ops: 400})
	if err != nil || k.Ops != 400 || k.Violations != 0 || k.Jain <= 0 || k.MaxWait <= 0 {
		t.Fatalf("contended: %+v, %v", k, err)
	}
	// The memory store queues in FIFO order, so the turns are fair.
	t.Logf("contended: %+v", k)
	if k.Jain < 0.9 {
		t.Errorf("contended Jain = %v on a FIFO store", k.Jain)
	}
}

func TestDurationBudget(t *testing.T) {
	c := dlm.New(memory.New())
	start := time.Now()
	r, err := workload.Contended(t.Context(), workload.Client(c), "k", 2, 0, workload.Budget{Duration: 50 * time.Millisecond})
	if err != nil || r.Ops == 0 {
		t.Fatalf("%+v, %v", r, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("a 50ms budget ran %s", el)
	}
}

func TestBadBudget(t *testing.T) {
	c := dlm.New(memory.New())
	if _, err := workload.Uncontended(t.Context(), workload.Client(c), "u", workload.Budget{}); err == nil {
		t.Fatal("an empty budget was accepted")
	}
	if _, err := workload.DistinctKeys(t.Context(), workload.Client(c), "u", 0, workload.Budget{Ops: 1}); err == nil {
		t.Fatal("zero lockers were accepted")
	}
}

// grantAll is a deliberately broken store that grants every request, so
// that the workloads' exclusion check can be seen to fail.
type grantAll struct{}

func (grantAll) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{Token: 1}, nil
}
func (grantAll) Extend(context.Context, driver.Request, driver.Grant) error  { return nil }
func (grantAll) Release(context.Context, driver.Request, driver.Grant) error { return nil }

func TestViolationIsCaught(t *testing.T) {
	c := dlm.New(grantAll{})
	r, err := workload.Contended(t.Context(), workload.Client(c), "k", 8, time.Millisecond, workload.Budget{Ops: 200})
	if !errors.Is(err, workload.ErrViolation) || r.Violations == 0 {
		t.Fatalf("a store granting everyone gave %+v, %v", r, err)
	}
}

// cancelOnGrant is a store that cancels the run's context as it grants a
// lock: the run ends, as an interrupted dlm bench does, with the lock held.
type cancelOnGrant struct {
	driver.Driver
	cancel context.CancelFunc
}

func (s cancelOnGrant) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := s.Driver.Acquire(ctx, req)
	if err == nil {
		s.cancel()
	}
	return g, err
}

// A run whose context ends while it holds a lock still releases it: left
// held until its TTL, the lock would make the next run fail (--wait 0) or
// wait.
func TestStoppedRunReleasesItsLock(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: testenv.StartRedis(t).Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	st := redis.New(rdb)
	defer st.Close()
	for _, tc := range []struct {
		name string
		run  func(context.Context, *dlm.Client) error
	}{
		{"uncontended", func(ctx context.Context, c *dlm.Client) error {
			_, err := workload.Uncontended(ctx, workload.Client(c), "uncontended", workload.Budget{Ops: 10})
			return err
		}},
		{"contended", func(ctx context.Context, c *dlm.Client) error {
			_, err := workload.Contended(ctx, workload.Client(c), "contended", 1, 0, workload.Budget{Ops: 10})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if err := tc.run(ctx, dlm.New(cancelOnGrant{st, cancel})); !errors.Is(err, context.Canceled) {
				t.Fatalf("a run whose context ended: %v, want context.Canceled", err)
			}
			l, err := dlm.New(st).Acquire(t.Context(), tc.name, dlm.WithWait(0))
			if err != nil {
				t.Fatalf("the lock was left held: %v", err)
			}
			l.Release(t.Context())
		})
	}
}

// flaky fails every nth call.
type flaky struct {
	workload.Locker
	n     int64
	calls atomic.Int64
}

func (f *flaky) Lock(ctx context.Context, w int, name string, wait bool) (workload.Unlock, error) {
	if f.calls.Add(1)%f.n == 0 {
		return nil, errBroken
	}
	return f.Locker.Lock(ctx, w, name, wait)
}

// A cycle that fails is counted, the workers go on, and the run's error
// says what failed: a run with errors is not a clean run.
func TestErrorsAreCounted(t *testing.T) {
	lk := &flaky{Locker: workload.Client(dlm.New(memory.New())), n: 10}
	res, err := workload.DistinctKeys(t.Context(), lk, "flaky", 4, workload.Budget{Ops: 400})
	if !errors.Is(err, errBroken) || res.Errors != 40 || res.Ops != 360 {
		t.Fatalf("%+v, %v; want 360 cycles, 40 errors and errBroken", res, err)
	}
	res, err = workload.Contended(t.Context(), lk, "flaky", 4, 0, workload.Budget{Ops: 400})
	if !errors.Is(err, errBroken) || res.Errors != 40 || res.Ops != 360 {
		t.Fatalf("contended: %+v, %v; want 360 acquisitions, 40 errors and errBroken", res, err)
	}
}

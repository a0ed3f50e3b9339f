package etcd_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// go test -run '^$' -bench . -benchtime 2s ./etcd/

func BenchmarkUncontended(b *testing.B) {
	e := newEnv(b)
	c, _ := e.client()
	ctx := context.Background()
	name := resource(b)
	b.ResetTimer()
	for b.Loop() {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParallelDistinctKeys(b *testing.B) {
	e := newEnv(b)
	c, _ := e.client()
	ctx := context.Background()
	var seq atomic.Int64
	b.SetParallelism(32) // 64 lockers on this 2-core machine
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("%s/%d", b.Name(), seq.Add(1))
		for pb.Next() {
			l, err := c.Acquire(ctx, name, dlm.WithWait(0))
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkContendedHandoff runs 8 waiters on one key, each holding the lock
// for 1 ms, and reports acquisitions per second, the gap from a release to
// the next grant, Jain's fairness index over the waiters' acquisition
// counts, and the longest single wait.
func BenchmarkContendedHandoff(b *testing.B) {
	e := newEnv(b)
	c, _ := e.client()
	ctx := context.Background()
	name := resource(b)
	const waiters, hold = 8, time.Millisecond

	var (
		mu          sync.Mutex
		lastRelease time.Time
		gaps        []time.Duration
		maxWait     time.Duration
		inside      atomic.Int32
		violations  atomic.Int32
		remaining   atomic.Int64
	)
	counts := make([]int, waiters)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for remaining.Add(-1) >= 0 {
				asked := time.Now()
				l, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second))
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				mu.Lock()
				if !lastRelease.IsZero() {
					gaps = append(gaps, got.Sub(lastRelease))
				}
				maxWait = max(maxWait, got.Sub(asked))
				counts[w]++
				mu.Unlock()
				time.Sleep(hold) // the critical section's work
				inside.Add(-1)
				mu.Lock()
				lastRelease = time.Now()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if v := violations.Load(); v != 0 {
		b.Fatalf("%d mutual exclusion violations", v)
	}
	slices.Sort(gaps)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	if len(gaps) > 0 {
		b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "gap-p50-µs")
		b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "gap-p99-µs")
	}
	b.ReportMetric(jain(counts), "jain")
	b.ReportMetric(float64(maxWait.Milliseconds()), "max-wait-ms")
}

// jain is Jain's fairness index: 1 when every waiter got the same share.
func jain(counts []int) float64 {
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

package storetest

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// Uncontended measures one try-lock and release of a single resource that
// nobody else wants, and reports the median and 99th percentile of one
// acquire+release (p50-µs, p99-µs).
func Uncontended(b *testing.B, c *dlm.Client) {
	ctx := context.Background()
	name := Resource(b)
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	if len(took) > 0 {
		b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
}

// ParallelDistinctKeys measures try-locks and releases by 32 lockers per
// CPU (b.SetParallelism(32)), each on a resource of its own: the store's
// throughput without contention.
func ParallelDistinctKeys(b *testing.B, c *dlm.Client) {
	ctx := context.Background()
	b.SetParallelism(32) // 64 lockers on a 2-core machine
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := Resource(b)
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

// HandoffWaiters is the number of waiters of ContendedHandoff.
const HandoffWaiters = 8

// ContendedHandoff runs HandoffWaiters waiters on one resource, each holding
// the lock for 1 ms per acquisition, with a TTL of 5 s and then opts. It
// reports acquisitions per second (acq/s), the median and 99th percentile gap
// from a release to the next grant (gap-p50-µs, gap-p99-µs), Jain's
// fairness index over the waiters' acquisition counts (jain), and the longest
// single wait (max-wait-ms). It fails on any mutual exclusion violation.
func ContendedHandoff(b *testing.B, c *dlm.Client, opts ...dlm.Option) {
	ctx := context.Background()
	name := Resource(b)
	const hold = time.Millisecond
	opts = append([]dlm.Option{dlm.WithTTL(5 * time.Second)}, opts...)

	var (
		mu          sync.Mutex
		lastRelease time.Time
		gaps        []time.Duration
		maxWait     time.Duration
		inside      atomic.Int32
		violations  atomic.Int32
		remaining   atomic.Int64
	)
	counts := make([]int, HandoffWaiters)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range HandoffWaiters {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				asked := time.Now()
				l, err := c.Acquire(ctx, name, opts...)
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
		})
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

// jain is Jain's fairness index: 1 when every waiter got the same share, 1/n
// when one got everything, NaN when nobody got anything.
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

package storetest

import (
	"context"
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/workload"
)

// Uncontended measures one try-lock and release of a single resource that
// nobody else wants, and reports the median and 99th percentile of one
// acquire+release (p50-µs, p99-µs).
func Uncontended(b *testing.B, c *dlm.Client) {
	b.ResetTimer()
	res, err := workload.Uncontended(context.Background(), workload.Client(c), Resource(b), workload.Budget{Ops: b.N})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(res.P50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(res.P99.Nanoseconds())/1e3, "p99-µs")
}

// ParallelDistinctKeys measures try-locks and releases by workload.Lockers
// lockers, each on a resource of its own: the store's throughput without
// contention (ops/s).
func ParallelDistinctKeys(b *testing.B, c *dlm.Client) {
	b.ResetTimer()
	res, err := workload.DistinctKeys(context.Background(), workload.Client(c), Resource(b), workload.Lockers, workload.Budget{Ops: b.N})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSecond, "ops/s")
}

// HandoffWaiters is the number of waiters of ContendedHandoff.
const HandoffWaiters = workload.Waiters

// ContendedHandoff runs HandoffWaiters waiters on one resource, each holding
// the lock for 1 ms per acquisition, with a TTL of 5 s and then opts. It
// reports acquisitions per second (acq/s), the median and 99th percentile gap
// from a release to the next grant (gap-p50-µs, gap-p99-µs), Jain's
// fairness index over the waiters' acquisition counts (jain), and the longest
// single wait (max-wait-ms). It fails on any mutual exclusion violation.
func ContendedHandoff(b *testing.B, c *dlm.Client, opts ...dlm.Option) {
	b.ResetTimer()
	res, err := workload.Contended(context.Background(), workload.Client(c, opts...), Resource(b), HandoffWaiters, workload.Hold, workload.Budget{Ops: b.N})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSecond, "acq/s")
	b.ReportMetric(float64(res.P50.Microseconds()), "gap-p50-µs")
	b.ReportMetric(float64(res.P99.Microseconds()), "gap-p99-µs")
	b.ReportMetric(res.Jain, "jain")
	b.ReportMetric(float64(res.MaxWait.Milliseconds()), "max-wait-ms")
}

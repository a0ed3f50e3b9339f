package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/workload"
)

// go test -run '^$' -bench . -benchtime 2s ./postgres/

// benchClient returns a client over a store on a pool of n connections.
func benchClient(b *testing.B, n int32) *dlm.Client {
	e := newEnv(b)
	p := e.pool(n)
	warm(b, p, n)
	return dlm.New(newStore(b, p))
}

// warm opens n connections, so that dialling is not measured.
func warm(b *testing.B, p *pgxpool.Pool, n int32) {
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := p.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

func BenchmarkUncontended(b *testing.B) { storetest.Uncontended(b, benchClient(b, 4)) }

// BenchmarkParallelDistinctKeys gives each of its 64 lockers a connection.
func BenchmarkParallelDistinctKeys(b *testing.B) {
	storetest.ParallelDistinctKeys(b, benchClient(b, 64))
}

// BenchmarkContendedHandoff gives each waiter a connection, and two more.
func BenchmarkContendedHandoff(b *testing.B) {
	storetest.ContendedHandoff(b, benchClient(b, storetest.HandoffWaiters+2))
}

// BenchmarkUncontendedMetadata is BenchmarkUncontended with metadata on
// every acquisition, which the store records in its holder table.
func BenchmarkUncontendedMetadata(b *testing.B) {
	c := benchClient(b, 4)
	b.ResetTimer()
	res, err := workload.Uncontended(context.Background(), workload.Client(c, dlm.WithMetadata("host-1 pid 4242")),
		storetest.Resource(b), workload.Budget{Ops: b.N})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(res.P50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(res.P99.Nanoseconds())/1e3, "p99-µs")
}

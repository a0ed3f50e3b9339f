package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// BenchmarkSessionCycle measures one lock cycle (pg_try_advisory_lock, then
// pg_advisory_unlock, one statement at a time) on a plain pgx connection and
// on a shared session, in alternating blocks of 100 so that both see the
// same moments of a noisy machine, and reports the median cycle of each:
// what a session adds to pgx's own round trips.
//
//	go test -run '^$' -bench SessionCycle -benchtime 20000x ./postgres/
func BenchmarkSessionCycle(b *testing.B) {
	p := testenv.StartPostgres(b)
	ctx := b.Context()
	plain := connectTB(ctx, b, p)
	defer plain.Close(context.Background())
	s, err := openSession(ctx, connectTB(ctx, b, p), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	const lock, unlock = "SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
	ways := []struct {
		name  string
		query func(sql string, key int64) (bool, error)
		took  []time.Duration
	}{
		{name: "pgx", query: func(sql string, key int64) (ok bool, err error) {
			return ok, plain.QueryRow(ctx, sql, key).Scan(&ok)
		}},
		{name: "session", query: func(sql string, key int64) (ok bool, err error) {
			return ok, s.query(ctx, sql, []any{key}, &ok)
		}},
	}
	i := 0
	for b.Loop() {
		w := &ways[i/100%2]
		i++
		start := time.Now()
		for _, sql := range []string{lock, unlock} {
			if ok, err := w.query(sql, 1); err != nil || !ok {
				b.Fatalf("%s: %s: %v, %v", w.name, sql, ok, err)
			}
		}
		w.took = append(w.took, time.Since(start))
	}
	for _, w := range ways {
		if len(w.took) > 0 {
			slices.Sort(w.took)
			b.ReportMetric(float64(w.took[len(w.took)/2].Nanoseconds())/1e3, w.name+"-p50-µs")
		}
	}
}

package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
)

// go test -run '^$' -bench ServerCost -benchtime 2000x ./redis/

// BenchmarkServerCost reports what the store's scripts cost Redis, from
// INFO commandstats: µs of server time per EVALSHA (usec_per_call, the
// time inside the script, network excluded) and the commands each script
// runs (redis.call). Uncontended: b.N acquisitions of distinct resources
// (each a new token counter), then an extend of each, then a release of
// each, then an acquisition of each again (acquire-again: the counter
// exists, the usual case of a lock taken before). Contended: the
// standard contended workload (8 waiters, 1 ms hold) for b.N grants, every
// script of it together (acquire, refresh, release, leave).
func BenchmarkServerCost(b *testing.B) {
	e := newEnv(b)
	c, s := e.client()
	ctx := context.Background()
	reqs := make([]driver.Request, b.N)
	grants := make([]driver.Grant, b.N)
	for i := range reqs {
		reqs[i] = request("cost/"+strconv.Itoa(i), time.Minute, "")
	}
	// Load the scripts, so that no call pays for an EVAL.
	warm := request("cost/warm", time.Minute, "")
	if g, err := s.Acquire(ctx, warm); err == nil {
		_ = s.Extend(ctx, warm, g)
		_ = s.Release(ctx, warm, g)
	}
	phase := func(name string, f func(i int) error) {
		testenv.ResetRedisStats(b, e.rdb)
		for i := range reqs {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
		st := testenv.RedisScriptStats(b, e.rdb)
		if st.Scripts == 0 {
			b.Fatal("no EVALSHA in INFO commandstats")
		}
		us, calls := st.PerScript()
		b.ReportMetric(us, name+"-µs")
		b.ReportMetric(calls, name+"-calls")
	}
	b.ResetTimer()
	phase("acquire", func(i int) (err error) {
		grants[i], err = s.Acquire(ctx, reqs[i])
		return err
	})
	phase("extend", func(i int) error { return s.Extend(ctx, reqs[i], grants[i]) })
	phase("release", func(i int) error { return s.Release(ctx, reqs[i], grants[i]) })
	phase("acquire-again", func(i int) (err error) {
		grants[i], err = s.Acquire(ctx, reqs[i])
		return err
	})
	for i := range reqs {
		if err := s.Release(ctx, reqs[i], grants[i]); err != nil {
			b.Fatal(err)
		}
	}

	testenv.ResetRedisStats(b, e.rdb)
	_, err := workload.Contended(ctx, workload.Client(c), storetest.Resource(b), workload.Waiters, workload.Hold, workload.Budget{Ops: b.N})
	if err != nil {
		b.Fatal(err)
	}
	st := testenv.RedisScriptStats(b, e.rdb)
	if st.Scripts == 0 {
		b.Fatal("no EVALSHA in INFO commandstats")
	}
	us, calls := st.PerScript()
	scripts := st.Scripts
	b.ReportMetric(us, "contended-µs")
	b.ReportMetric(calls, "contended-calls")
	// Per grant: a handoff done inside the release makes the release
	// script longer and spares the waiter's acquire script.
	b.ReportMetric(scripts/float64(b.N), "contended-scripts/grant")
	b.ReportMetric(us*scripts/float64(b.N), "contended-µs/grant")
}

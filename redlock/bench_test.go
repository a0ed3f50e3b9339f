package redlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redlock"
)

// BenchmarkAcquireRelease measures one uncontended acquire and release on
// five nodes, asking the nodes at once (the store) or one after another
// (naive Redlock clients).
func BenchmarkAcquireRelease(b *testing.B) {
	e := newEnv(b)
	modes := []struct {
		name string
		opts []redlock.Option
	}{
		{"parallel", nil},
		{"sequential", []redlock.Option{redlock.WithSequential()}},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			s := e.store(m.opts...)
			ctx := context.Background()
			name := storetest.Resource(b)
			for b.Loop() {
				req := request(name, 10*time.Second)
				g, err := s.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx, req, g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// go test -run '^$' -bench . -benchtime 2s ./redlock/

// benchClient returns a dlm client over five fresh nodes, with the store's
// default options (as storeurl opens it).
func benchClient(b *testing.B) *dlm.Client {
	return dlm.New(redlock.New(newEnv(b).clients()))
}

func BenchmarkUncontended(b *testing.B) { storetest.Uncontended(b, benchClient(b)) }

func BenchmarkContendedHandoff(b *testing.B) { storetest.ContendedHandoff(b, benchClient(b)) }

// go test -run '^$' -bench ServerCost -benchtime 20000x ./redlock/

// BenchmarkServerCost reports what the store's scripts cost the nodes, from
// INFO commandstats summed over the five: µs of server time per EVALSHA on
// one node (the time inside the script, network excluded), the commands
// each runs (redis.call), and the µs a whole cycle costs all nodes
// together; and the nodes' CPU time per cycle, network included, from
// /proc (10 ms ticks: use 20000 cycles or more). b.N acquisitions of
// distinct resources, then a release of each, without waiters. The store
// asks the nodes one after another (WithSequential), so that no node waits
// for a core while it runs a script: INFO commandstats counts wall time.
func BenchmarkServerCost(b *testing.B) {
	e := newEnv(b)
	s := e.store(redlock.WithSequential())
	ctx := context.Background()
	reqs := make([]driver.Request, b.N)
	grants := make([]driver.Grant, b.N)
	for i := range reqs {
		reqs[i] = request("cost/"+strconv.Itoa(i), time.Minute)
	}
	// Load the scripts, so that no call pays for an EVAL.
	warm := request("cost/warm", time.Minute)
	if g, err := s.Acquire(ctx, warm); err == nil {
		_ = s.Release(ctx, warm, g)
	}
	cpu := func() (total time.Duration) {
		for _, srv := range e.srvs {
			d, err := testenv.ProcessCPU(srv.PID())
			if err != nil {
				b.Fatal(err)
			}
			total += d
		}
		return total
	}
	var cycle float64
	phase := func(name string, f func(i int) error) {
		testenv.ResetRedisStats(b, e.raw...)
		for i := range reqs {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
		// An acquisition returns at a quorum; the other nodes' calls
		// are counted once they are in.
		var st testenv.ScriptStats
		storetest.Await(b, 10*time.Second, "every node's call counted", func() bool {
			st = testenv.RedisScriptStats(b, e.raw...)
			return st.Scripts >= float64(nodes*b.N)
		})
		us, calls := st.PerScript()
		b.ReportMetric(us, name+"-µs")
		b.ReportMetric(calls, name+"-calls")
		cycle += st.Micros / float64(b.N)
	}
	b.ResetTimer()
	cpu0 := cpu()
	phase("acquire", func(i int) (err error) {
		grants[i], err = s.Acquire(ctx, reqs[i])
		return err
	})
	phase("release", func(i int) error { return s.Release(ctx, reqs[i], grants[i]) })
	b.ReportMetric(cycle, "cycle-µs-all-nodes")
	b.ReportMetric(float64((cpu()-cpu0).Microseconds())/float64(b.N), "cycle-cpu-µs-all-nodes")
}

package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/redis"
)

// go test -run '^$' -bench CycleFloor -benchtime 20000x ./redis/

// BenchmarkCycleFloor splits what an uncontended cycle of the store costs
// against bsm/redislock's commands, on one server, the cycles of its four
// ways taking turns of 100 ms (see workload.UncontendedTurns), b.N cycles
// each:
//
//   - set: SET NX PX, and an owner-checked DEL in a script: the commands
//     of redislock's cycle;
//   - fair: a script that grants only when nobody queues (EXISTS on the
//     queue) with SET NX PX and takes a fencing token from a counter
//     (INCR), and set's release: the least a fenced grant that lets
//     nobody barge can cost;
//   - scripts: the store's own acquire and release scripts, called
//     directly: fair plus the queue mark and the grant's time in the
//     lock's value, the counter's floor check, and the release's check of
//     the mark;
//   - dlm: the store through a dlm client, which adds the lease.
//
// It reports each way's median cycle (µs), Redis's CPU per cycle (µs,
// network included), and each median's ratio to set's.
func BenchmarkCycleFloor(b *testing.B) {
	e := newEnv(b)
	c, _ := e.client()
	lks := []workload.Locker{
		scriptLocker{e.rdb, nil, floorRelease},
		scriptLocker{e.rdb, fairAcquire, floorRelease},
		scriptLocker{e.rdb, redislua.Acquire, redislua.Release},
		workload.Client(c),
	}
	names := []string{"set", "fair", "scripts", "dlm"}
	res := storetest.Resource(b)
	resources := make([]string, len(names))
	for i, n := range names {
		resources[i] = res + "/" + n
	}
	cpu := make([]time.Duration, len(lks))
	pid := e.srv.PID()
	b.ResetTimer()
	results, errs := workload.UncontendedTurns(context.Background(), lks, resources, workload.Budget{Ops: b.N}, 100*time.Millisecond,
		func(i int) func() {
			before, err := testenv.ProcessTreeCPU(pid)
			return func() {
				after, err2 := testenv.ProcessTreeCPU(pid)
				if err == nil && err2 == nil {
					cpu[i] += after - before
				}
			}
		})
	b.StopTimer()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("%s: %v", names[i], err)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for i, r := range results {
		b.ReportMetric(us(r.P50), names[i]+"-p50-µs")
		b.ReportMetric(us(cpu[i])/float64(r.Ops), names[i]+"-redis-cpu-µs")
		if i > 0 {
			b.ReportMetric(float64(r.P50)/float64(results[0].P50), names[i]+"/set")
		}
	}
	b.ReportMetric(0, "ns/op")
}

var (
	fairAcquire = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1] .. ':queue') == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[1] .. ':fence')
end
return false`)
	floorRelease = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// floorOwner is the owner every floor lock is taken for.
const floorOwner = "0123456789abcdef0123456789abcdef"

// floorSettings are the store's default settings as its scripts take them.
var floorSettings = redislua.Settings(4*redis.DefaultQueueRefresh, redis.DefaultFenceRetention)

// scriptLocker takes a lock with acquire (SET NX PX when nil), with the
// store's arguments, and releases it with release, under the store's key
// layout.
type scriptLocker struct {
	rdb              *goredis.Client
	acquire, release *goredis.Script
}

func (l scriptLocker) Lock(ctx context.Context, _ int, name string, _ bool) (workload.Unlock, error) {
	key := redislua.KeysFor("dlm:", name, floorOwner).Lock
	var err error
	if l.acquire == nil {
		var ok bool
		if ok, err = l.rdb.SetNX(ctx, key, floorOwner, 10*time.Second).Result(); err == nil && !ok {
			err = goredis.Nil
		}
	} else {
		// Owner, TTL ms, the grant's time and no metadata, no
		// queueing, the store's default settings: the store's
		// arguments of an attempt that does not wait.
		err = l.acquire.Run(ctx, l.rdb, []string{key}, floorOwner, 10000, redislua.TimeThen(time.Now(), ""), "0", floorSettings).Err()
	}
	if err == goredis.Nil {
		return nil, workload.ErrBusy
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		// The owner, then the store's release's time and settings
		// (which set's release ignores).
		return l.release.Run(ctx, l.rdb, []string{key}, floorOwner, redislua.TimeThen(time.Now(), floorSettings)).Err()
	}, nil
}

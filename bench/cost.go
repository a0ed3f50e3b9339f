package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// cost is what a workload cost the servers behind a target, per
// acquisition (an acquire and its release): the dlm server processes' CPU
// time (user and system, from /proc/PID/stat) and Go heap allocations
// (go_memstats_mallocs_total of their /metrics), and the CPU time of the
// store's servers (Redis, PostgreSQL with its backends, etcd). Zero when
// not measured.
type cost struct {
	CPUPerCycle      time.Duration `json:"cpu_per_cycle"`
	AllocsPerCycle   float64       `json:"allocs_per_cycle"`
	StoreCPUPerCycle time.Duration `json:"store_cpu_per_cycle"`
}

// usage is a reading of the processes' counters; ok tells which were read.
type usage struct {
	cpu, storeCPU  time.Duration
	allocs         float64
	dlmOK, storeOK bool
}

// readUsage sums the counters of the dlm server processes procs and of the
// store's server processes pids. A set is not ok if it is empty or any of
// it could not be read (not Linux, a process gone). Reading a dlm server's
// allocations is an HTTP request that costs it CPU time: a reading that
// opens a measured span (opening) takes them before the CPU times, one
// that closes it after, so that the span holds none of that request's CPU
// time (its allocations, see scrapeAllocs, it cannot avoid).
func readUsage(ctx context.Context, procs []*testenv.DLM, pids []int, opening bool) (u usage) {
	u.dlmOK = len(procs) > 0
	for _, d := range procs {
		var allocs float64
		var err error
		if opening {
			if allocs, err = mallocs(ctx, d.HTTPAddr()); err != nil {
				u.dlmOK = false
				break
			}
		}
		cpu, err := testenv.ProcessCPU(d.PID())
		if err != nil {
			u.dlmOK = false
			break
		}
		if !opening {
			if allocs, err = mallocs(ctx, d.HTTPAddr()); err != nil {
				u.dlmOK = false
				break
			}
		}
		u.cpu += cpu
		u.allocs += allocs
	}
	u.storeOK = len(pids) > 0
	for _, pid := range pids {
		cpu, err := testenv.ProcessTreeCPU(pid)
		if err != nil {
			u.storeOK = false
			break
		}
		u.storeCPU += cpu
	}
	return u
}

// scrapeAllocs returns the allocations that reading procs' allocation
// counters costs them: two readings in a row differ by one request's worth
// on each server. A span between two readings holds as many (the end of
// the first request and the start of the last), which matters for a span
// of a few hundred cycles.
func scrapeAllocs(ctx context.Context, procs []*testenv.DLM) float64 {
	if len(procs) == 0 {
		return 0
	}
	a := readUsage(ctx, procs, nil, true)
	b := readUsage(ctx, procs, nil, true)
	if !a.dlmOK || !b.dlmOK {
		return 0
	}
	return max(b.allocs-a.allocs, 0)
}

// add adds to u what the span between two readings cost, less scrape
// allocations (see scrapeAllocs). u starts ok for the sets it measures;
// one reading that fails spoils its set for good.
func (u *usage) add(before, after usage, scrape float64) {
	u.dlmOK = u.dlmOK && before.dlmOK && after.dlmOK
	u.storeOK = u.storeOK && before.storeOK && after.storeOK
	u.cpu += after.cpu - before.cpu
	u.allocs += max(after.allocs-before.allocs-scrape, 0)
	u.storeCPU += after.storeCPU - before.storeCPU
}

// cost returns the cost of ops acquisitions from u, a sum of spans (see
// add).
func (u usage) cost(ops int) cost {
	return per(usage{dlmOK: u.dlmOK, storeOK: u.storeOK}, u, ops)
}

// per returns the cost of ops acquisitions between two readings.
func per(before, after usage, ops int) cost {
	var c cost
	if ops <= 0 {
		return c
	}
	if before.dlmOK && after.dlmOK {
		c.CPUPerCycle = (after.cpu - before.cpu) / time.Duration(ops)
		c.AllocsPerCycle = (after.allocs - before.allocs) / float64(ops)
	}
	if before.storeOK && after.storeOK {
		c.StoreCPUPerCycle = (after.storeCPU - before.storeCPU) / time.Duration(ops)
	}
	return c
}

// mallocs reads go_memstats_mallocs_total from a dlm server's metrics.
func mallocs(ctx context.Context, httpAddr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_mallocs_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("bench: %s/metrics has no go_memstats_mallocs_total", httpAddr)
}

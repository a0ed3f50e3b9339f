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
// it could not be read (not Linux, a process gone).
func readUsage(ctx context.Context, procs []*testenv.DLM, pids []int) (u usage) {
	u.dlmOK = len(procs) > 0
	for _, d := range procs {
		cpu, err := testenv.ProcessCPU(d.PID())
		if err != nil {
			u.dlmOK = false
			break
		}
		allocs, err := mallocs(ctx, d.HTTPAddr())
		if err != nil {
			u.dlmOK = false
			break
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

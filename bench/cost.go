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

// cost is what a workload cost the dlm server processes behind a target,
// per acquisition (an acquire and its release): CPU time (user and system,
// from /proc/PID/stat) and Go heap allocations (go_memstats_mallocs_total
// of their /metrics). Zero when not measured.
type cost struct {
	CPUPerCycle    time.Duration `json:"cpu_per_cycle"`
	AllocsPerCycle float64       `json:"allocs_per_cycle"`
}

// usage is a reading of the processes' counters.
type usage struct {
	cpu    time.Duration
	allocs float64
}

// readUsage sums the counters of procs. ok is false if any could not be
// read (not Linux, a process gone).
func readUsage(ctx context.Context, procs []*testenv.DLM) (u usage, ok bool) {
	for _, d := range procs {
		cpu, err := testenv.ProcessCPU(d.PID())
		if err != nil {
			return u, false
		}
		allocs, err := mallocs(ctx, d.HTTPAddr())
		if err != nil {
			return u, false
		}
		u.cpu += cpu
		u.allocs += allocs
	}
	return u, len(procs) > 0
}

// per returns the cost of ops acquisitions between two readings.
func per(before, after usage, ops int) cost {
	if ops <= 0 {
		return cost{}
	}
	return cost{
		CPUPerCycle:    (after.cpu - before.cpu) / time.Duration(ops),
		AllocsPerCycle: (after.allocs - before.allocs) / float64(ops),
	}
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

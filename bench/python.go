package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// The Python client's cycle (clients/python/bench/cycle.py): an uncontended
// acquire + release from Python over the unary JSON API, beside the usual
// Redis lock with redis-py (SET NX PX, a Lua release) in the same run, on
// the in-memory and the durable server. It needs a Python with redis-py
// (-python; scripts/bench.sh makes a virtual environment for it).

// pythonCycles is how many cycles each measurement runs.
const pythonCycles = 2000

// pyCycle is one measurement of cycle.py, in microseconds.
type pyCycle struct {
	Server    string  `json:"server"`
	DLMP50    float64 `json:"dlm_p50_us"`
	DLMMean   float64 `json:"dlm_mean_us"`
	RedisP50  float64 `json:"redis_p50_us"`
	RedisMean float64 `json:"redis_mean_us"`
	Err       string  `json:"error,omitempty"`
}

// measurePython runs cycle.py against the in-memory and the durable
// server, with python, if the servers run.
func measurePython(ctx context.Context, python string, srv *servers) []pyCycle {
	if python == "" || srv.dlmMem == nil || len(srv.redis) == 0 {
		return nil
	}
	script, err := filepath.Abs(filepath.Join("..", "clients", "python", "bench", "cycle.py"))
	if err != nil {
		return []pyCycle{{Err: err.Error()}}
	}
	var out []pyCycle
	for _, s := range []struct {
		name string
		http string
	}{{"in-memory log", srv.dlmMem.HTTPAddr()}, {"1 node, durable", srv.dlm1.HTTPAddr()}} {
		c := pyCycle{Server: s.name}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		cmd := exec.CommandContext(cctx, python, script, "--dlm", "http://"+s.http, "--redis", "redis://"+srv.redis[0].Addr(),
			"--n", fmt.Sprint(pythonCycles), "--json")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		cancel()
		if err != nil {
			c.Err = fmt.Sprintf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
		} else if err := json.Unmarshal(b, &c); err != nil {
			c.Err = fmt.Sprintf("cycle.py said %q: %v", b, err)
		}
		c.Server = s.name
		out = append(out, c)
	}
	return out
}

// pythonSection writes the Python table.
func (rep *report) pythonSection(p func(string, ...any)) {
	if len(rep.Python) == 0 {
		return
	}
	p("\n## From Python: the unary JSON API beside redis-py\n\n")
	p("One uncontended acquire + release per cycle, %d cycles after a warm-up, one at a time: the dlm Python client (clients/python, standard library, HTTP/1.1 keep-alive) against the dlm server, and redis-py's `SET NX PX` with a Lua release against Redis (no persistence), on the same machine in the same run: `python3 clients/python/bench/cycle.py`.\n\n", pythonCycles)
	p("| dlm server | dlm p50 | dlm mean | redis-py p50 | redis-py mean | dlm / redis-py (p50) |\n|---|--:|--:|--:|--:|--:|\n")
	for _, c := range rep.Python {
		if c.Err != "" {
			p("| %s | failed: %s | | | | |\n", c.Server, c.Err)
			continue
		}
		p("| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.2f× |\n", c.Server, c.DLMP50, c.DLMMean, c.RedisP50, c.RedisMean, c.DLMP50/c.RedisP50)
	}
}

// pythonGoals are the Python client's targets.
func (rep *report) pythonGoals() []goal {
	var gs []goal
	for _, c := range rep.Python {
		if c.Err != "" || c.RedisP50 == 0 {
			continue
		}
		x := c.DLMP50 / c.RedisP50
		gs = append(gs, goal{fmt.Sprintf("Python cycle on the dlm server (%s): p50 ≤ 2× redis-py's", c.Server),
			fmt.Sprintf("%.0f µs vs %.0f µs: %.2f×", c.DLMP50, c.RedisP50, x), x <= 2})
	}
	return gs
}

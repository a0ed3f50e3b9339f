package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

// report is the outcome of one run.
type report struct {
	Command   string    `json:"command"`
	Started   time.Time `json:"started"`
	Machine   string    `json:"machine"`
	Go        string    `json:"go"`
	Libraries []string  `json:"libraries"`
	Servers   []string  `json:"servers"`
	Budget    string    `json:"budget"`
	Floor     floor     `json:"floor"`
	Lockers   int       `json:"lockers"`
	Waiters   int       `json:"waiters"`
	Rounds    int       `json:"rounds"`
	// The distinct-keys workload's turns: the counted span and the
	// warm-up before it.
	DistinctTurn time.Duration `json:"distinct_turn"`
	DistinctWarm time.Duration `json:"distinct_warm"`
	Rows         []row         `json:"rows"`
	Python       []pyCycle     `json:"python,omitempty"`
	Failover     []failover    `json:"failover,omitempty"`
}

// row is one target's results, one per workload in workloads' order.
type row struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	DLM     bool              `json:"dlm"`
	Results []workload.Result `json:"results"`
	Costs   []cost            `json:"costs"` // the dlm server's, per result
	Err     string            `json:"error,omitempty"`
	rounds  []row             // the rounds merged into this one, for ratios (see versus)
}

func newReport(cfg config) *report {
	r := &report{Command: cfg.command, Started: time.Now().UTC(), Machine: machine(), Go: runtime.Version(),
		Lockers: cfg.lockers, Waiters: cfg.waiters, Rounds: cfg.rounds, DistinctTurn: cfg.distinctTurn, DistinctWarm: cfg.distinctWarm}
	switch {
	case cfg.budget.Ops > 0 && cfg.budget.Duration > 0:
		r.Budget = fmt.Sprintf("%s or %d acquisitions per workload, whichever comes first", cfg.budget.Duration, cfg.budget.Ops)
	case cfg.budget.Ops > 0:
		r.Budget = fmt.Sprintf("%d acquisitions per workload", cfg.budget.Ops)
	default:
		r.Budget = fmt.Sprintf("%s per workload", cfg.budget.Duration)
	}
	if cfg.rounds > 1 {
		r.Budget += fmt.Sprintf("; every target ran %d times, interleaved, and each workload shows its median round (violations and errors: the sums of all rounds)", cfg.rounds)
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "go.etcd.io/etcd/client/v3",
				"github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9", "github.com/hashicorp/raft":
				r.Libraries = append(r.Libraries, d.Path+" "+d.Version)
			}
		}
	}
	return r
}

// machine describes the CPU, the core count and the kernel.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel += " " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d cores, %s/%s %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, kernel)
}

// costs writes the dlm servers' cost per acquisition, by workload.
func (rep *report) costs(p func(string, ...any)) {
	rep.costTable(p, "dlm server",
		"Cost on the dlm server: CPU time and allocations per acquisition",
		"An acquisition with its release, on the server processes only (all nodes of a cluster): CPU time from /proc/PID/stat (10 ms ticks), heap allocations from go_memstats_mallocs_total.",
		func(c cost) string {
			if c.CPUPerCycle == 0 && c.AllocsPerCycle == 0 {
				return ""
			}
			return fmt.Sprintf("%s, %.0f", dur(c.CPUPerCycle), c.AllocsPerCycle)
		})
}

// storeCosts writes the store servers' CPU time per acquisition, by
// workload, for dlm's stores and the libraries beside them.
func (rep *report) storeCosts(p func(string, ...any)) {
	rep.costTable(p, "store / library",
		"Cost on the store's servers: CPU time per acquisition",
		"An acquisition with its release, on the store's server processes only (every Redis node a target uses; PostgreSQL with its backends; etcd): user and system CPU time from /proc/PID/stat (10 ms ticks), network handling included. It shows what a cycle costs the store whatever the machine's speed at that moment.",
		func(c cost) string {
			if c.StoreCPUPerCycle == 0 {
				return ""
			}
			return dur(c.StoreCPUPerCycle)
		})
}

// costTable writes a table of the costs that cell shows ("" when not
// measured), a row for each target with at least one, under a heading
// and its introduction; nothing when no target has any.
func (rep *report) costTable(p func(string, ...any), first, heading, intro string, cell func(cost) string) {
	head := false
	for _, r := range rep.Rows {
		cells := make([]string, len(workloads))
		measured := false
		for j, w := range workloads {
			cells[j] = "-"
			for i, res := range r.Results {
				if res.Workload == w && i < len(r.Costs) {
					if c := cell(r.Costs[i]); c != "" {
						cells[j], measured = c, true
					}
				}
			}
		}
		if !measured {
			continue
		}
		if !head {
			p("\n## %s\n\n%s\n\n", heading, intro)
			p("| %s | %s |\n|---|%s\n", first, strings.Join(workloads, " | "), strings.Repeat("--:|", len(workloads)))
			head = true
		}
		p("| %s | %s |\n", label(r), strings.Join(cells, " | "))
	}
}

// result returns the row's result of workload w, if it ran.
func (r row) result(w string) (workload.Result, bool) {
	for _, res := range r.Results {
		if res.Workload == w && res.Ops > 0 {
			return res, true
		}
	}
	return workload.Result{}, false
}

// failed reports whether a run failed or broke mutual exclusion.
func (rep *report) failed() bool {
	for _, r := range rep.Rows {
		if r.Err != "" {
			return true
		}
	}
	return false
}

// markdown writes the report: how it was made, a table per workload, the
// targets with the ratios measured.
func (rep *report) markdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Benchmarks: dlm beside the lock libraries users would otherwise pick\n\n")
	p("Generated by the comparison module under `bench/`; every figure below comes from this one run, on the same servers.\n\n")
	p("- Command: `bash scripts/bench.sh` (which runs `cd bench && %s`)\n", rep.Command)
	p("- Date: %s\n", rep.Started.Format("2006-01-02 15:04 MST"))
	p("- Machine: %s; %s\n", rep.Machine, rep.Go)
	p("- Servers, each started by the run on free loopback ports: %s; dlm servers with their command's defaults (durable Raft log, -raft-timeout 1s)\n", strings.Join(rep.Servers, ", "))
	p("- Libraries: %s\n", strings.Join(rep.Libraries, ", "))
	p("- Budget: %s. Clients and servers share the machine's cores.\n", rep.Budget)
	if rep.Floor != (floor{}) {
		p("- The physical floor: %s.\n", rep.Floor)
	}
	p("\n")
	p("Every workload checks mutual exclusion as it runs, and counts the calls that failed (an error other than the run's own end, contention included where nobody else wants the lock): a column of violations or of errors must read 0, and a run with errors is not a clean run.\n")
	p("Waiting acquisitions take a %s TTL. Libraries without a waiting queue poll; their retry setting is in the row's name.\n\n", workload.WaitTTL)

	p("## Uncontended: one locker, acquire (without waiting) and release\n\n")
	p("Within a round the targets take turns of %s each, every target once per sweep in a fresh random order, until every one has run for the budget, so that all of them are measured at the same moments: on a shared machine one cycle's time drifts by tens of percent within seconds, more than the differences compared here. Cycles/s counts a target's own turns.\n\n", turn)
	p("| store / library | p50 | p99 | cycles/s | violations | errors |\n|---|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Rows {
		if res, ok := r.result("uncontended"); ok {
			p("| %s | %s | %s | %.0f | %d | %d |\n", label(r), dur(res.P50), dur(res.P99), res.PerSecond, res.Violations, res.Errors)
		}
	}
	p("\n## Distinct keys: %d lockers, each on a key of its own\n\n", rep.Lockers)
	p("The targets take turns here too: in each, a target's lockers run for %s, not counted, then for %s, counted. The first part lets a target wake what idled through the others' turns (a pool of %d PostgreSQL backends, say), which a run of seconds spreads thin and a short turn would not. Cycles/s is the counted cycles over the counted time.\n\n", rep.DistinctWarm, rep.DistinctTurn, rep.Lockers)
	p("| store / library | cycles/s | p50 | p99 | violations | errors |\n|---|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Rows {
		if res, ok := r.result("distinct-keys"); ok {
			p("| %s | %.0f | %s | %s | %d | %d |\n", label(r), res.PerSecond, dur(res.P50), dur(res.P99), res.Violations, res.Errors)
		}
	}
	p("\n## Contended: %d waiters on one key, each holding it %s\n\n", rep.Waiters, workload.Hold)
	p("The hold is a nanosleep in the kernel, not time.Sleep, whose wake-up Go rounds to a millisecond once the process hears from the network meanwhile (see internal/workload/hold_linux.go). ")
	p("Gap: from a release to the next grant. Jain: fairness of the waiters' shares (1 is perfectly fair). Longest wait: from asking to getting, the worst single time.\n\n")
	p("| store / library | acquisitions/s | gap p50 | gap p99 | Jain | longest wait | violations | errors |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Rows {
		if res, ok := r.result("contended"); ok {
			p("| %s | %.0f | %s | %s | %.3f | %s | %d | %d |\n", label(r), res.PerSecond, dur(res.P50), dur(res.P99), res.Jain, dur(res.MaxWait), res.Violations, res.Errors)
		}
	}
	rep.costs(p)
	rep.storeCosts(p)
	rep.pythonSection(p)
	rep.failoverSection(p)
	var failed []string
	for _, r := range rep.Rows {
		if r.Err != "" {
			failed = append(failed, fmt.Sprintf("- %s: %s", r.Name, r.Err))
		}
	}
	if len(failed) > 0 {
		p("\n## Failures\n\n%s\n", strings.Join(failed, "\n"))
	}
	p("\n## Targets\n\n")
	if rep.Rounds > 1 {
		p("A ratio against another target is judged on the median of the rounds' ratios, each between the two targets' figures in one round (the uncontended and distinct-keys workloads run in interleaved turns); of two middle rounds, the worse. The figures beside it are the two targets' medians, as in the tables above.\n\n")
	}
	p("| target | measured | met |\n|---|---|:-:|\n")
	for _, g := range rep.goals() {
		met := "no"
		if g.met {
			met = "yes"
		}
		p("| %s | %s | %s |\n", g.text, g.measured, met)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func label(r row) string {
	if r.DLM {
		return "**" + r.Name + "**"
	}
	return r.Name
}

// dur prints a duration with three significant figures.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

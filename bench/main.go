// Command bench runs dlm's standard workloads, in one run on the same
// servers, against dlm's stores and against the libraries users would
// otherwise pick (go-redsync/redsync, bsm/redislock, etcd's
// concurrency.Mutex, PostgreSQL advisory locks through pgx), and writes the
// comparison as Markdown (BENCHMARKS.md).
//
// It starts every server it needs on free loopback ports and stops them
// when it ends: redis-server, postgres and etcd must be installed
// (scripts/bench.sh installs them as root). It is a module of its own, so
// that dlm itself never depends on the other lock libraries.
//
//	cd bench && go run . -out ../BENCHMARKS.md
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

func main() {
	if kind := os.Getenv(echoEnv); kind != "" {
		if err := serveEcho(kind); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is what the flags set.
type config struct {
	budget   workload.Budget
	lockers  int // of distinct-keys
	waiters  int // of contended
	out      string
	json     string
	command  string
	python   string // a Python with redis-py, for the Python client's cycle
	failover int    // trials of the leader fail-over per store; 0: none
	rounds   int    // interleaved runs of every target; each figure is the median round

	// The distinct-keys workload's turns: counted span and warm-up (see
	// runRound).
	distinctTurn, distinctWarm time.Duration
}

// workloads are the standard workloads, in the order they run.
var workloads = []string{"uncontended", "distinct-keys", "contended"}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := config{distinctTurn: distinctTurn, distinctWarm: distinctWarm}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "run only these targets (comma-separated ids; see -list)")
	list := fs.Bool("list", false, "list the targets and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the bench process (the clients) to this file, for the workloads only")
	fs.DurationVar(&cfg.budget.Duration, "duration", 3*time.Second, "how long each workload runs on each target")
	fs.IntVar(&cfg.budget.Ops, "ops", 0, "stop each workload after this many acquisitions (0: no limit)")
	fs.IntVar(&cfg.lockers, "lockers", workload.Lockers, "lockers of distinct-keys")
	fs.IntVar(&cfg.waiters, "waiters", workload.Waiters, "waiters of contended")
	fs.StringVar(&cfg.out, "out", "", "write the Markdown report to this file (default: standard output)")
	fs.StringVar(&cfg.json, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&cfg.python, "python", "", "a Python interpreter with redis-py: also measure the Python client's cycle beside redis-py (needs the dlm and redis targets)")
	fs.IntVar(&cfg.rounds, "rounds", 1, "run every target this many times, interleaved, and report each workload's median round")
	fs.IntVar(&cfg.failover, "failover", 0, "also measure leader fail-over with this many trials per store (needs the dlm target, which builds dlm)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.failover < 0 || cfg.failover > 100 {
		fmt.Fprintln(stderr, "bench: -failover must lie between 0 and 100")
		return 2
	}
	if cfg.rounds < 1 || cfg.rounds > 20 {
		fmt.Fprintln(stderr, "bench: -rounds must lie between 1 and 20")
		return 2
	}
	if cfg.lockers < 1 || cfg.lockers > 1000 || cfg.waiters < 1 || cfg.waiters > 1000 {
		fmt.Fprintln(stderr, "bench: -lockers and -waiters must lie between 1 and 1000")
		return 2
	}
	cfg.command = strings.TrimSpace("go run . " + strings.Join(args, " "))
	all := targets()
	if *list {
		for _, t := range all {
			fmt.Fprintf(stdout, "%-16s %s\n", t.id, t.name)
		}
		return 0
	}
	chosen := all
	if *only != "" {
		chosen = nil
		for _, id := range strings.Split(*only, ",") {
			i := slices.IndexFunc(all, func(t target) bool { return t.id == id })
			if i < 0 {
				fmt.Fprintf(stderr, "bench: -only: unknown target %q (see -list)\n", id)
				return 2
			}
			chosen = append(chosen, all[i])
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer stop()
	}
	rep, err := measure(ctx, cfg, chosen, log)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if err := writeOut(cfg.out, stdout, func(w io.Writer) error { return rep.markdown(w) }); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if cfg.json != "" {
		err := writeOut(cfg.json, stdout, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		})
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
	}
	if rep.failed() {
		fmt.Fprintln(stderr, "bench: some runs failed or broke mutual exclusion; see the report")
		return 1
	}
	return 0
}

// measure starts the servers and runs every workload on every target.
func measure(ctx context.Context, cfg config, chosen []target, log *slog.Logger) (*report, error) {
	need := map[string]bool{}
	for _, t := range chosen {
		need[t.needs] = true
	}
	srv, err := startServers(need, log)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	rep := newReport(cfg)
	rep.Servers = srv.versions(ctx)
	if rep.Floor, err = measureFloor(os.TempDir()); err != nil {
		log.Warn("the physical floor was not measured", "err", err)
	}
	log.Info("the physical floor", "fdatasync_p50", rep.Floor.Fdatasync, "loopback_rtt_p50", rep.Floor.Loopback,
		"process_tcp_rtt_p50", rep.Floor.ProcessTCP, "process_grpc_rtt_p50", rep.Floor.ProcessGRPC)
	rounds := make(map[string][]row, len(chosen))
	for n := range cfg.rounds {
		order := slices.Clone(chosen)
		if n%2 == 1 {
			slices.Reverse(order)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for _, row := range runRound(ctx, cfg, order, srv) {
			logRow(log, n+1, row)
			rounds[row.ID] = append(rounds[row.ID], row)
		}
	}
	for _, t := range chosen {
		rep.Rows = append(rep.Rows, medianRow(rounds[t.id]))
	}
	rep.Python = measurePython(ctx, cfg.python, srv)
	for _, c := range rep.Python {
		log.Info("python cycle", "server", c.Server, "dlm_p50_us", c.DLMP50, "redis_p50_us", c.RedisP50, "err", c.Err)
	}
	rep.Failover = measureFailover(ctx, cfg.failover, srv)
	for _, f := range rep.Failover {
		log.Info("leader fail-over", "store", f.Store, "trials", f.Trials, "p50", f.P50, "max", f.Max, "err", f.Err)
	}
	return rep, nil
}

// logRow logs the figures of one round of one target.
func logRow(log *slog.Logger, round int, row row) {
	for i, r := range row.Results {
		args := []any{"round", round, "target", row.ID, "workload", r.Workload, "ops", r.Ops, "per_second", int(r.PerSecond),
			"p50", r.P50, "p99", r.P99, "jain", r.Jain, "max_wait", r.MaxWait, "violations", r.Violations, "errors", r.Errors}
		if c := row.Costs[i]; c.CPUPerCycle != 0 || c.AllocsPerCycle != 0 {
			args = append(args, "server_cpu_per_cycle", c.CPUPerCycle, "server_allocs_per_cycle", int(c.AllocsPerCycle))
		}
		if c := row.Costs[i]; c.StoreCPUPerCycle != 0 {
			args = append(args, "store_cpu_per_cycle", c.StoreCPUPerCycle)
		}
		log.Info("measured", args...)
	}
	if row.Err != "" {
		log.Error("failed", "round", round, "target", row.ID, "err", row.Err)
	}
}

// runContended runs the contended workload on one opened target (the
// other workloads run in turns, see runRound), and returns its result and
// what it cost the servers.
func runContended(ctx context.Context, cfg config, t target, srv *servers, lk workload.Locker) (workload.Result, cost, error) {
	procs, pids := t.processes(srv)
	before := readUsage(ctx, procs, pids, true)
	res, err := workload.Contended(ctx, lk, "bench/"+t.id+"/contended", cfg.waiters, workload.Hold, cfg.budget)
	return res, per(before, readUsage(ctx, procs, pids, false), res.Ops), err
}

// writeOut writes through fn to the file path, or to stdout if path is "".
func writeOut(path string, stdout io.Writer, fn func(io.Writer) error) error {
	if path == "" {
		return fn(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startCPUProfile starts profiling the process into path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/storeurl"
)

const benchUsage = `Usage: dlm bench [flags]

Runs the standard workloads against a store and prints what they measured:

  uncontended    one locker acquiring (without waiting) and releasing one lock:
                 latency of one acquire+release (p50, p99)
  distinct-keys  --lockers lockers, each on a lock of its own: cycles per second
  contended      --waiters waiters taking turns on one lock, holding it --hold
                 each time: acquisitions per second, the gap from a release to
                 the next grant (p50, p99), Jain's fairness index over the
                 waiters, and the longest single wait

Every workload checks mutual exclusion; a violation makes dlm bench exit 1.
Locks are named --prefix followed by the workload. A PostgreSQL store needs a
pool as large as the lockers (add pool_max_conns=70 to its URL).

Flags:
`

// benchFlags are the settings of `dlm bench`.
type benchFlags struct {
	store, prefix, workloads string
	duration, hold           time.Duration
	ops, lockers, waiters    int
	json                     bool
}

// benchReport is the output of dlm bench --json.
type benchReport struct {
	Store   string            `json:"store"`
	Kind    string            `json:"kind"`
	Started time.Time         `json:"started"`
	Results []workload.Result `json:"results"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f benchFlags
	fs := flag.NewFlagSet("dlm bench", flag.ContinueOnError)
	fs.StringVar(&f.store, "store", env("DLM_STORE", storeurl.DefaultURL), "store URL (env DLM_STORE)")
	fs.StringVar(&f.prefix, "prefix", "dlm-bench/", "prefix of the lock names")
	fs.StringVar(&f.workloads, "workloads", "uncontended,distinct-keys,contended", "the workloads to run, comma-separated")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "how long each workload runs at most")
	fs.IntVar(&f.ops, "ops", 0, "stop each workload after this many acquisitions (0: no limit)")
	fs.IntVar(&f.lockers, "lockers", workload.Lockers, "lockers of distinct-keys")
	fs.IntVar(&f.waiters, "waiters", workload.Waiters, "waiters of contended")
	fs.DurationVar(&f.hold, "hold", workload.Hold, "how long each contended acquisition holds the lock")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	if code, ok := parseFlags(fs, args, benchUsage, stderr); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dlm bench: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected arguments %q", fs.Args())
	case f.duration < 0 || f.ops < 0 || (f.duration == 0 && f.ops == 0):
		return usage("--duration or --ops must bound each workload")
	case f.lockers < 1 || f.lockers > 10000:
		return usage("--lockers %d: want 1 to 10000", f.lockers)
	case f.waiters < 1 || f.waiters > 1000:
		return usage("--waiters %d: want 1 to 1000", f.waiters)
	case f.hold < 0 || f.hold > time.Minute:
		return usage("--hold %s: want 0 to 1m", f.hold)
	}
	names := strings.Split(f.workloads, ",")
	for _, n := range names {
		if n != "uncontended" && n != "distinct-keys" && n != "contended" {
			return usage("--workloads: unknown workload %q (want uncontended, distinct-keys, contended)", n)
		}
	}
	if _, err := storeurl.Parse(f.store); err != nil {
		return usage("--store: %v", err)
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	store, err := storeurl.Open(octx, f.store, storeOptions("dlm bench")...)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "dlm bench: %s\n", userMessage(err))
		return storeExit(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		store.Close(cctx)
	}()
	lk := workload.Client(dlm.New(store.Driver()))
	report := benchReport{Store: store.String(), Kind: string(store.Kind()), Started: time.Now().UTC()}
	budget := workload.Budget{Ops: f.ops, Duration: f.duration}
	code := 0
	for _, n := range names {
		var res workload.Result
		name := f.prefix + n
		switch n {
		case "uncontended":
			res, err = workload.Uncontended(ctx, lk, name, budget)
		case "distinct-keys":
			res, err = workload.DistinctKeys(ctx, lk, name, f.lockers, budget)
		case "contended":
			res, err = workload.Contended(ctx, lk, name, f.waiters, f.hold, budget)
		}
		report.Results = append(report.Results, res)
		if err != nil {
			fmt.Fprintf(stderr, "dlm bench: %s: %s\n", n, userMessage(err))
			code = 1
			if denied(err) {
				code = exitDenied
				break
			}
			if errors.Is(err, dlm.ErrUnavailable) || ctx.Err() != nil {
				code = exitUnavailable
				break
			}
		}
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(report)
	} else {
		printBench(stdout, report)
	}
	return code
}

// printBench prints the report as a table.
func printBench(w io.Writer, r benchReport) {
	fmt.Fprintf(w, "store %s (%s)\n\n", r.Store, r.Kind)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tWORKERS\tOPS\tOPS/S\tP50\tP99\tJAIN\tMAX WAIT\tVIOLATIONS\tERRORS")
	for _, res := range r.Results {
		jain, maxWait, what := "-", "-", ""
		if res.Workload == "contended" {
			jain = fmt.Sprintf("%.3f", res.Jain)
			maxWait = round(res.MaxWait).String()
			what = "gap "
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s%s\t%s%s\t%s\t%s\t%d\t%d\n", res.Workload, res.Workers, res.Ops, res.PerSecond,
			what, round(res.P50), what, round(res.P99), jain, maxWait, res.Violations, res.Errors)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nP50/P99: one acquire+release; for contended, the gap from a release to the next grant.")
}

// round keeps three significant figures of a duration.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d >= time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/dlmhq/dlm/cmd/dlm/internal/demo"
)

// runDemo runs `dlm demo`: exit 0 when the story came out as it should, 1
// when it showed a bug (an oversell with the lock, a stale write accepted)
// or could not be played, 2 on a usage error.
const demoUsage = `Usage: dlm demo [flags]

Plays the story dlm was written for, with no setup: service instances sell the
last items of a product, first without a lock (they oversell), then with dlm
(they do not), then a lock holder paused past its TTL writes with a stale
fencing token, which the database rejects. A dlm server runs in this process;
the database is the demo's own, in memory, unless -db names a PostgreSQL one.

Flags:
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg demo.Config
	var asJSON, verbose bool
	var timeout time.Duration
	fs := flag.NewFlagSet("dlm demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Instances, "instances", demo.DefaultInstances, fmt.Sprintf("service instances selling concurrently (2 to %d)", demo.MaxInstances))
	fs.IntVar(&cfg.Stock, "stock", demo.DefaultStock, fmt.Sprintf("items left in stock (1 to %d)", demo.MaxStock))
	fs.StringVar(&cfg.DatabaseURL, "db", "", "PostgreSQL URL (postgres://...); default the demo's own database, in memory")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON (durations in nanoseconds)")
	fs.BoolVar(&verbose, "v", false, "log what the server and the clients do, on stderr")
	fs.DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	if code, ok := parseFlags(fs, args, demoUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm demo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if cfg.Instances <= 0 || cfg.Stock <= 0 { // 0 would mean the default to Validate
		fmt.Fprintf(stderr, "dlm demo: -instances %d -stock %d: want positive numbers\n", cfg.Instances, cfg.Stock)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "dlm demo: %s\n", strings.TrimPrefix(err.Error(), "demo: "))
		return 2
	}
	if timeout <= 0 {
		fmt.Fprintf(stderr, "dlm demo: -timeout %s: want a positive duration\n", timeout)
		return 2
	}
	if verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := stdout
	if asJSON {
		out = nil
	}
	rep, err := demo.Run(ctx, cfg, out)
	if err != nil {
		fmt.Fprintf(stderr, "dlm demo: %s\n", strings.TrimPrefix(err.Error(), "demo: "))
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "dlm demo: %v\n", err)
			return 1
		}
	}
	if p := rep.Problems(); len(p) > 0 {
		for _, s := range p {
			fmt.Fprintf(stderr, "dlm demo: bug: %s\n", s)
		}
		return 1
	}
	return 0
}

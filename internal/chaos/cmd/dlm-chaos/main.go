// Command dlm-chaos runs the fault-injection harness against a 3-node dlm
// cluster and checks the recorded history (see package chaos).
//
//	go run ./internal/chaos/cmd/dlm-chaos -duration 30m   # long run: rounds of faults, then the summary
//	go run ./internal/chaos/cmd/dlm-chaos -broken         # against the deliberately broken server: must find violations
//	go run ./internal/chaos/cmd/dlm-chaos -check DIR/history.jsonl
//	go run ./internal/chaos/cmd/dlm-chaos -rejoin 20      # time a killed node's catch-up after its restart
//	go run ./internal/chaos/cmd/dlm-chaos -faults flap-leader -rounds 2   # the leader flap alone
//
// Beside the rounds' faults, by default a share of the clients' calls have
// contexts that end at random (-cancel-share) and two clients run the
// strict try-lock workload (-try-clients).
//
// Exit status: 0 when a normal run finds no violation and the history is
// linearizable (or a -broken run finds a violation and the linearizability
// check rejects the history), 1 otherwise, 2 for bad flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"

	"github.com/anishathalye/porcupine"

	"github.com/dlmhq/dlm/internal/chaos"
)

func main() {
	chaos.RunClientIfAsked() // the harness starts its clients by running this command again
	os.Exit(run())
}

func run() int {
	var (
		cfg      chaos.Config
		faults   string
		broken   bool
		bin      string
		dir      string
		check    string
		seed     int64
		stopping bool
		rejoin   int
		down     time.Duration
		maxDown  time.Duration
	)
	fs := flag.NewFlagSet("dlm-chaos", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "start no round after this long (0: no limit; see -rounds)")
	fs.IntVar(&cfg.Rounds, "rounds", 0, "stop after this many rounds (0: no limit)")
	fs.StringVar(&faults, "faults", "", "comma-separated fault kinds to cycle through (default all: "+strings.Join(chaos.AllFaults, ",")+"; with -broken: "+chaos.PartitionLeader+","+chaos.KillLeader+")")
	fs.BoolVar(&cfg.FixedOrder, "fixed-order", false, "inject the faults in the order given instead of shuffling each cycle")
	fs.BoolVar(&broken, "broken", false, "run against the server built with -tags "+chaos.BrokenTag+" (a new leader does not extend session deadlines); succeed only if the checker finds violations")
	fs.BoolVar(&stopping, "stop-on-violation", false, "end the run after the first round with a violation (default with -broken)")
	fs.StringVar(&bin, "dlm", "", "the dlm binary the nodes run (default: go build it from this module)")
	fs.StringVar(&dir, "dir", "", "directory for data, logs, the history and the report (default: a new temporary directory, kept)")
	fs.StringVar(&check, "check", "", "only check this recorded history (JSON lines) and print the summary")
	fs.IntVar(&cfg.Clients, "clients", 3, "client processes")
	fs.IntVar(&cfg.Resources, "resources", 2, "resources the clients contend for")
	fs.DurationVar(&cfg.RaftTimeout, "raft-timeout", 100*time.Millisecond, "the nodes' Raft heartbeat and election timeout")
	fs.DurationVar(&cfg.SessionTTL, "session-ttl", time.Second, "the clients' session TTL")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", time.Second, "the clients' lease TTL (auto-renewed)")
	fs.DurationVar(&cfg.Hold, "hold", time.Second, "how long a node fault lasts")
	fs.DurationVar(&cfg.RecoveryBound, "recovery-bound", 0, "property 5: grants must resume this soon after a heal (default the election timeout + 1s)")
	fs.Float64Var(&cfg.CancelShare, "cancel-share", 0.2, "standing fault: the share of the clients' calls (acquire, extend, release) whose contexts end at a random moment, within 3x the median call time (0: none)")
	fs.IntVar(&cfg.TryClients, "try-clients", 2, "clients of the strict workload: try-locks of one resource, judged by porcupine against the strict model (0: none)")
	fs.DurationVar(&cfg.FlapFor, "flap-for", 0, "how long a "+chaos.FlapLeader+" round kills the leader every half TTL (default 10 TTL)")
	fs.DurationVar(&cfg.TakeoverBound, "takeover-bound", 0, "property 6: after a "+chaos.FlapLeader+" victim's death another client must be granted its resource this soon (default 2 TTL + 2 election timeouts)")
	fs.DurationVar(&cfg.LinearizeTimeout, "linearize-timeout", 0, "bound porcupine's check of the history; past it the verdict is Unknown (default 2m; a 30-minute run's history may need more)")
	fs.Int64Var(&seed, "seed", 0, "random seed (default: from the clock)")
	fs.IntVar(&rejoin, "rejoin", 0, "instead of a fault run: this many cycles of kill -9 a node (the leader every 4th), writes, restart; print how long the node took to catch up")
	fs.DurationVar(&down, "rejoin-down", time.Second, "with -rejoin: the shortest time a killed node stays down (the cycles' times are spread up to -rejoin-down-max)")
	fs.DurationVar(&maxDown, "rejoin-down-max", 2*time.Second, "with -rejoin: the longest time a killed node stays down")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dlm-chaos: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if check != "" {
		return checkFile(check, cfg)
	}
	if faults != "" {
		cfg.Faults = strings.Split(faults, ",")
		known := map[string]bool{}
		for _, k := range chaos.AllFaults {
			known[k] = true
		}
		for _, k := range cfg.Faults {
			if !known[k] {
				fmt.Fprintf(os.Stderr, "dlm-chaos: unknown fault %q (known: %s)\n", k, strings.Join(chaos.AllFaults, ","))
				return 2
			}
		}
	} else if broken {
		cfg.Faults = []string{chaos.PartitionLeader, chaos.KillLeader}
	}
	cfg.StopOnViolation = stopping || broken
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	cfg.Seed = uint64(seed)

	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "dlm-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, "dlm-chaos:", err)
			return 1
		}
	}
	cfg.Dir, _ = filepath.Abs(dir)
	if bin == "" {
		bin = filepath.Join(cfg.Dir, "dlm")
		if broken {
			bin += "-broken"
		}
		fmt.Printf("building %s\n", bin)
		if err := chaos.Build(bin, broken); err != nil {
			fmt.Fprintln(os.Stderr, "dlm-chaos:", err, "(run it inside the dlm module, or pass -dlm)")
			return 1
		}
	}
	cfg.Bin = bin
	cfg.Log = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if rejoin > 0 {
		return measureRejoin(ctx, chaos.RejoinConfig{Bin: bin, Dir: cfg.Dir, Cycles: rejoin, Down: down, MaxDown: maxDown,
			RaftTimeout: cfg.RaftTimeout, Log: os.Stdout})
	}
	fmt.Printf("dlm-chaos: seed %d, directory %s, duration %s, rounds %d, broken %v\n", seed, cfg.Dir, cfg.Duration, cfg.Rounds, broken)
	start := time.Now()
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlm-chaos:", err)
		return 1
	}
	r := res.Report
	fmt.Printf("\n=== summary (%s, seed %d) ===\n%s", time.Since(start).Round(time.Second), seed, r.Summary())
	for _, e := range res.Errors {
		fmt.Printf("harness error: %s\n", e)
	}
	if b, err := json.MarshalIndent(r, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(cfg.Dir, "report.json"), b, 0o644)
	}
	fmt.Printf("history: %s\nlogs and data: %s\n", res.History, cfg.Dir)
	if broken {
		if r.TotalViolations() == 0 || r.Linearizability.Result != porcupine.Illegal {
			fmt.Printf("FAIL: against the broken server the checker found %d violations and the linearizability check says %s\n",
				r.TotalViolations(), r.Linearizability)
			return 1
		}
		fmt.Printf("OK: both judges caught the broken server (%d violations; not linearizable)\n", r.TotalViolations())
		return 0
	}
	if r.TotalViolations() > 0 || r.Linearizability.Result != porcupine.Ok || len(res.Errors) > 0 {
		fmt.Println("FAIL")
		return 1
	}
	fmt.Println("OK")
	return 0
}

// measureRejoin runs chaos.MeasureRejoin and prints its summary.
func measureRejoin(ctx context.Context, cfg chaos.RejoinConfig) int {
	fmt.Printf("dlm-chaos: %d rejoin cycles, the node down %s to %s, election timeout %s, directory %s\n",
		cfg.Cycles, cfg.Down, max(cfg.Down, cfg.MaxDown), cfg.RaftTimeout, cfg.Dir)
	rs, err := chaos.MeasureRejoin(ctx, cfg)
	if len(rs) > 0 {
		fmt.Printf("\n=== rejoin ===\n%s", chaos.RejoinSummary(rs))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlm-chaos:", err)
		return 1
	}
	fmt.Printf("logs and data: %s\n", cfg.Dir)
	return 0
}

func checkFile(path string, cfg chaos.Config) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlm-chaos:", err)
		return 1
	}
	defer f.Close()
	evs, err := history.ReadEvents(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlm-chaos:", err)
		return 1
	}
	bound := cfg.RecoveryBound
	if bound == 0 {
		bound = cfg.RaftTimeout + time.Second
	}
	ttl := max(cfg.SessionTTL, cfg.LeaseTTL)
	takeover := cfg.TakeoverBound
	if takeover == 0 {
		takeover = 2*ttl + 2*cfg.RaftTimeout
	}
	r := history.Check(evs, history.CheckConfig{RecoveryBound: bound, TakeoverBound: takeover, LinearizeTimeout: cfg.LinearizeTimeout})
	fmt.Print(r.Summary())
	if r.TotalViolations() > 0 || r.Linearizability.Result != porcupine.Ok {
		return 1
	}
	return 0
}

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

// TestTargets runs every target on real servers: each one excludes (a
// second worker is refused without waiting while the first holds the
// lock, and gets it once released), and a round of them all runs the
// three workloads on a small budget without a violation. Then the report
// renders with a row per target and the targets evaluated.
func TestTargets(t *testing.T) {
	ctx := t.Context()
	all := targets()
	need := map[string]bool{}
	for _, tg := range all {
		need[tg.needs] = true
	}
	srv, err := startServers(need, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	// Few lockers: the test checks the adapters, not the machine's limits,
	// and runs with the race detector.
	cfg := config{budget: workload.Budget{Ops: 40}, lockers: 8, waiters: 4, command: "go test",
		distinctTurn: 20 * time.Millisecond, distinctWarm: 10 * time.Millisecond}
	rep := newReport(cfg)
	for _, tg := range all {
		t.Run(tg.id, func(t *testing.T) { excludes(ctx, t, tg, srv) })
	}
	// One round of every target: the uncontended and distinct-keys cycles
	// in turns across them all, then the contended workload target by
	// target.
	rows := runRound(ctx, cfg, all, srv)
	for i, r := range rows {
		if r.ID != all[i].id || r.Err != "" || len(r.Results) != len(workloads) {
			t.Errorf("%s: %d results, error %q", all[i].id, len(r.Results), r.Err)
			continue
		}
		for j, res := range r.Results {
			if res.Workload != workloads[j] || res.Ops == 0 || res.Violations != 0 {
				t.Errorf("%s: %+v", r.ID, res)
			}
		}
		rep.Rows = append(rep.Rows, r)
	}
	var b bytes.Buffer
	if err := rep.markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, tg := range all {
		if strings.Count(md, tg.name) < 3 {
			t.Errorf("the report has fewer than 3 rows for %s", tg.name)
		}
	}
	if n := len(rep.goals()); n < 10 {
		t.Errorf("%d targets evaluated, want every one (10)\n%s", n, md)
	}
}

// excludes checks that the target's lock is exclusive between workers.
func excludes(ctx context.Context, t *testing.T, tg target, srv *servers) {
	t.Helper()
	lk, closeLocker, err := tg.open(ctx, srv)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLocker()
	if p, ok := lk.(workload.Preparer); ok {
		if err := p.Prepare(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
	name := "bench-test/" + tg.id
	unlock, err := lk.Lock(ctx, 0, name, false)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if u2, err := lk.Lock(ctx, 1, name, false); !errors.Is(err, workload.ErrBusy) {
		if err == nil {
			u2(ctx)
		}
		t.Fatalf("second worker without waiting while held: %v, want ErrBusy", err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	u2, err := lk.Lock(ctx, 1, name, true)
	if err != nil {
		t.Fatalf("second worker after the release: %v", err)
	}
	if err := u2(ctx); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
}

func TestDur(t *testing.T) {
	for d, want := range map[int64]string{0: "-", 1500: "2 µs", 2_340_000: "2.34 ms", 23_400_000: "23.4 ms", 234_000_000: "234 ms", 2_340_000_000: "2.34 s"} {
		if got := dur(time.Duration(d)); got != want {
			t.Errorf("dur(%d) = %q, want %q", d, got, want)
		}
	}
}

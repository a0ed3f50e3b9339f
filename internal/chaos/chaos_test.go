package chaos

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"

	"github.com/anishathalye/porcupine"
)

// The dlm binaries the runs start: the server as it ships, and the
// deliberately broken one (build tag dlm_broken_promotion: a new leader
// does not extend session deadlines). They are built once, when a test
// first needs them, without -race even when the tests have it, to keep
// three servers and the clients within two cores.
var (
	binOnce           sync.Once
	binDir            string
	dlmBin, brokenBin string
	binErr            error
)

func TestMain(m *testing.M) {
	RunClientIfAsked() // the runs start their clients by running this binary again
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func binaries(t *testing.T) (normal, broken string) {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "dlm-chaos-bin-"); binErr != nil {
			return
		}
		dlmBin, brokenBin = filepath.Join(binDir, "dlm"), filepath.Join(binDir, "dlm-broken")
		if binErr = Build(dlmBin, false); binErr == nil {
			binErr = Build(brokenBin, true)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return dlmBin, brokenBin
}

// runDir is a directory for a run's data, logs and history, kept when the
// test fails.
func runDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "dlm-chaos-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("run kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Logf("%s", b[:len(b)-min(1, len(b))])
	return len(b), nil
}

// A short run against the server as it ships: every fault kind once, and
// no violation. The election timeout is 100ms (-raft-timeout). The partition
// comes before the kills, so that a deposed leader whose log tail Raft
// truncated is then killed and restarted (what raft-wal v0.4.0 could not
// reopen; the server now keeps its log in raft-boltdb).
func TestChaosShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and client processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	bin, _ := binaries(t)
	faults := []string{PartitionLeader, KillLeader, StopLeader, KillFollower, PauseClient, IsolateClient}
	// Property 5's target is the election timeout + 1s (1.1s here). Long
	// runs on a quiet machine meet it, but this run must pass on a busy
	// 2-core machine too, where a starved node or client can delay the
	// first grant after a heal by a second or more: it holds grants to a
	// loose 5s (that they resume at all) and logs the times; dlm-chaos
	// checks the target.
	const bound = 5 * time.Second
	res, err := Run(ctx, Config{Bin: bin, Dir: runDir(t), Faults: faults, FixedOrder: true, Rounds: len(faults),
		Seed: 1, Log: testLog{t}, RecoveryBound: bound})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	t.Logf("%s in %s:\n%s", filepath.Base(res.Dir), time.Since(start).Round(time.Second), r.Summary())
	for _, e := range res.Errors {
		t.Errorf("harness: %s", e)
	}
	if n := r.TotalViolations(); n != 0 {
		t.Errorf("%d violations", n)
	}
	if r.Linearizability.Result != porcupine.Ok {
		t.Errorf("linearizability: %s, want Ok", r.Linearizability)
	}
	for _, k := range faults {
		if r.Faults[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	if r.Acquisitions < 100 {
		t.Errorf("only %d acquisitions", r.Acquisitions)
	}
	for _, rec := range r.Recoveries {
		if rec.Recovery < 0 || rec.Recovery > bound {
			t.Errorf("round %d (%s): recovery %s", rec.Round, rec.Fault, rec.Recovery)
		}
	}
}

// The standing faults, briefly: a share of every worker's calls cut short
// by their contexts, the strict try-lock workload beside the contended one,
// two leader flaps (the victim paused, then killed) among leader kills, and
// where mounting is allowed (root) two full disks (the leader's, then a
// follower's). Both judges must pass: no violation, the contended history linearizable,
// and the strict one too (a refusal only while held, a release that
// returned freed the lock, an acquisition that failed without an answer
// left nothing held past its client's next grant). As in the short run, the
// bounds (recovery, takeover) are loose so that a busy machine passes;
// the figures are logged, and dlm-chaos checks the targets.
func TestChaosStandingFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and client processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	bin, _ := binaries(t)
	faults := []string{FlapLeader, KillLeader, FillDisk, FlapLeader, KillLeader, FillDisk}
	fills := 2
	if os.Geteuid() != 0 {
		faults, fills = slices.DeleteFunc(faults, func(k string) bool { return k == FillDisk }), 0
	}
	const bound = 5 * time.Second
	res, err := Run(ctx, Config{Bin: bin, Dir: runDir(t), Faults: faults, FixedOrder: true, Rounds: len(faults),
		CancelShare: 0.3, TryClients: 2, FlapFor: 4 * time.Second, Settle: 200 * time.Millisecond,
		Seed: 3, Log: testLog{t}, RecoveryBound: bound, TakeoverBound: bound})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	t.Logf("%s in %s:\n%s", filepath.Base(res.Dir), time.Since(start).Round(time.Second), r.Summary())
	for _, e := range res.Errors {
		t.Errorf("harness: %s", e)
	}
	if n := r.TotalViolations(); n != 0 {
		t.Errorf("%d violations", n)
	}
	lin := r.Linearizability
	if lin.Result != porcupine.Ok {
		t.Errorf("linearizability: %s, want Ok", lin)
	}
	if lin.StrictOps == 0 || lin.Refusals == 0 || lin.Unsure == 0 {
		t.Errorf("strict workload: %d operations, %d refusals, %d without an answer; want some of each", lin.StrictOps, lin.Refusals, lin.Unsure)
	}
	cut, kills, full := 0, 0, 0
	for _, e := range res.Events {
		switch {
		case e.Kind == history.Note && strings.HasPrefix(e.Note, "disk full"):
			full++
		case (e.Kind == history.Granted || e.Kind == history.AcquireFailed) && strings.Contains(e.Note, "cut short"),
			e.Kind == history.Note && strings.Contains(e.Note, "release try"):
			cut++
		case e.Kind == history.Note && strings.HasPrefix(e.Note, "flap:"):
			kills++
		}
	}
	t.Logf("calls cut short: %d; leaders killed by the flaps: %d; full disks that stopped a node's writes: %d", cut, kills, full)
	if full != fills {
		t.Errorf("%d full disks stopped a node's writes, want %d", full, fills)
	}
	if cut == 0 {
		t.Errorf("no call was cut short")
	}
	if kills < 4 {
		t.Errorf("the flaps killed %d leaders, want at least 4", kills)
	}
	if len(r.Takeovers) != 2 {
		t.Fatalf("takeovers: %+v, want 2", r.Takeovers)
	}
	for _, tk := range r.Takeovers {
		if tk.After < 0 || tk.After > bound {
			t.Errorf("round %d (%s): takeover %s", tk.Round, tk.How, tk.After)
		}
	}
}

// The same harness against a server whose new leader does not extend
// session deadlines: sessions expire as soon as a new leader serves, while
// their clients still believe they hold their locks. The checker must see
// it (property 4). The fault is a partition of the leader, which hits a
// lock that is held, with other clients waiting for it: the holder's
// session expires on the new leader at once and a waiter, reconnecting as
// fast as the holder, is granted the lock before the holder hears of it.
// Whether the holder or a waiter comes back first is a race: with five
// clients on one resource, about every other round shows a violation (in
// trials, the first violation came in rounds 1 to 5), so sixteen rounds
// miss it with odds of about one in sixty thousand; the run stops at the first
// round that shows one. (A SIGSTOPped leader does not show it: clients
// notice it no sooner than their sessions end on their side.)
func TestChaosCatchesBrokenPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and client processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, broken := binaries(t)
	res, err := Run(ctx, Config{Bin: broken, Dir: runDir(t), Faults: []string{PartitionLeader}, Rounds: 16, Resources: 1, Clients: 5,
		StopOnViolation: true, Seed: 2, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	t.Logf("%s", r.Summary())
	if r.ViolationCount[history.PropBelief] == 0 {
		t.Errorf("the checker saw no belief violation against the broken server")
	}
	if r.Linearizability.Result != porcupine.Illegal {
		t.Errorf("linearizability: %s against the broken server, want Illegal", r.Linearizability)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/testenv"
)

// list runs dlm ls --json and returns the resources.
func list(t *testing.T, store, prefix string) []resourceJSON {
	t.Helper()
	code, out, stderr := runDLM(t, nil, "ls", store, "--prefix", prefix, "--json")
	if code != 0 {
		t.Fatalf("dlm ls: exit %d; stderr:\n%s", code, stderr)
	}
	var res []resourceJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("dlm ls --json: %v\n%s", err, out)
	}
	return res
}

// awaitList polls dlm ls until the resource named name satisfies cond (an
// absent resource is seen as one without holders or waiters). The state is
// inside the store, which offers no event to wait on.
func awaitList(t *testing.T, store, name string, cond func(resourceJSON) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := resourceJSON{Resource: name}
		for _, r := range list(t, store, name) {
			if r.Resource == name {
				got = r
			}
		}
		if cond(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached the awaited state; last: %+v", name, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLsShowsHoldersAndQueue(t *testing.T) {
	for kind, storeOf := range dlmAndRedis {
		t.Run(kind, func(t *testing.T) {
			store := storeOf(t)
			name := "ls-" + kind + "/orders"
			holder := startDLM(t, nil, "run", store, "--lock", name, "--metadata", "the holder", "--", "sh", "-c", holdScript)
			holder.stdout.expect(t, "held", 30*time.Second)
			startDLM(t, nil, "run", store, "--lock", name, "--metadata", "first waiter", "--", "true")
			awaitList(t, store, name, func(r resourceJSON) bool { return len(r.Waiters) == 1 })
			startDLM(t, nil, "run", store, "--lock", name, "--metadata", "second waiter", "--", "true")
			awaitList(t, store, name, func(r resourceJSON) bool { return len(r.Waiters) == 2 })

			res := list(t, store, "ls-"+kind+"/")
			if len(res) != 1 || res[0].Resource != name {
				t.Fatalf("ls --prefix: %+v", res)
			}
			r := res[0]
			h := r.Holders[0]
			if len(r.Holders) != 1 || h.Mode != "EX" || h.Token == 0 || h.Metadata != "the holder" {
				t.Errorf("holder %+v", h)
			}
			if h.TTLMs <= 0 || h.TTLMs > 10_000 {
				t.Errorf("holder TTL left %d ms, want in (0, 10s]", h.TTLMs)
			}
			// Redis keeps only the waiters' owner ids, in order.
			if kind == "dlm" && (r.Waiters[0].Metadata != "first waiter" || r.Waiters[1].Metadata != "second waiter") {
				t.Errorf("waiters out of order: %+v", r.Waiters)
			}
			if other := list(t, store, "ls-none/"); len(other) != 0 {
				t.Errorf("a prefix that matches nothing listed %+v", other)
			}

			code, out, _ := runDLM(t, nil, "ls", store, "--prefix", "ls-"+kind+"/")
			if code != 0 || !strings.Contains(out, "RESOURCE") || !strings.Contains(out, name) ||
				!strings.Contains(out, "waiting #2") || !strings.Contains(out, fmt.Sprint(h.Token)) {
				t.Errorf("dlm ls table:\n%s", out)
			}
		})
	}
}

var reachable = regexp.MustCompile(`reachable:\s+yes`)

func TestStatus(t *testing.T) {
	store := storeFlag(sharedServer(t))
	code, out, stderr := runDLM(t, nil, "status", store)
	if code != 0 || !reachable.MatchString(out) || !strings.Contains(out, "(leader)") || !regexp.MustCompile(`version:\s+\S`).MatchString(out) {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runDLM(t, nil, "status", store, "--json")
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.Server == nil || !rep.Server.Leader || rep.Server.Sessions < 1 || rep.Server.Version == "" {
		t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
	}
	dead := fmt.Sprintf("--store=dlm://127.0.0.1:%d", testenv.FreePort(t))
	code, out, _ = runDLM(t, nil, "status", dead)
	if code != exitUnavailable || !regexp.MustCompile(`reachable:\s+no`).MatchString(out) {
		t.Fatalf("status of a dead server: exit %d\n%s", code, out)
	}
	r := testenv.StartRedis(t)
	if code, out, stderr := runDLM(t, nil, "status", "--store=redis://"+r.Addr()); code != 0 || !reachable.MatchString(out) {
		t.Fatalf("status of redis: exit %d\n%s%s", code, out, stderr)
	}
}

func TestBench(t *testing.T) {
	store := storeFlag(sharedServer(t))
	code, out, stderr := runDLM(t, nil, "bench", store, "--ops", "200", "--lockers", "8", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err, out)
	}
	if len(rep.Results) != 3 {
		t.Fatalf("results: %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if r.Ops != 200 || r.Violations != 0 || r.PerSecond <= 0 || r.P50 <= 0 {
			t.Errorf("%s: %+v", r.Workload, r)
		}
	}
	if c := rep.Results[2]; c.Workload != "contended" || c.Jain < 0.9 || c.MaxWait <= 0 {
		t.Errorf("contended: %+v", c)
	}
	code, out, _ = runDLM(t, nil, "bench", store, "--ops", "50", "--workloads", "uncontended")
	if code != 0 || !strings.Contains(out, "WORKLOAD") || !strings.Contains(out, "uncontended") {
		t.Fatalf("bench table: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"bench", store, "--workloads", "nope"},
		{"bench", store, "--ops", "0", "--duration", "0"},
		{"bench", store, "--lockers", "0"},
		{"bench", "--store", "ftp://x"},
	} {
		if code, _, stderr := runDLM(t, nil, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", args, code, stderr)
		}
	}
}

// Owner ids come from the store like names do, and anyone who can write to
// it can put terminal escapes, tabs and newlines in them: the table quotes
// them, so they can neither act on the terminal nor make rows or columns.
func TestLsQuotesOwners(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	// A lock's value is its 32-byte owner id, then its metadata; a
	// waiter is its owner id in the queue, alive in the liveness set.
	if err := rdb.Set(ctx, "dlm:{forged}", "\x1b]0;title\a\x1b[2J\tcol\nrow-----------metadata", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waiter := "w\x1b[31m\tcol\nrow"
	rdb.RPush(ctx, "dlm:{forged}:queue", waiter)
	rdb.ZAdd(ctx, "dlm:{forged}:live", goredis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: waiter})
	code, out, stderr := runDLM(t, nil, "ls", "--store=redis://"+r.Addr())
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if strings.ContainsAny(out, "\x1b\a\t") {
		t.Errorf("control characters reached the table:\n%q", out)
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 3 {
		t.Errorf("%d lines, want a header, a holder and a waiter:\n%s", len(lines), out)
	}
}

// floodResource puts n PR locks, each with metadata of meta bytes, on
// resource name of the server at addr through one raw session, and closes
// the session at the end of the test.
func floodResource(t *testing.T, addr, name string, n, meta int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := dlmpb.NewDLMClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *dlmpb.SessionRequest) {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(5 * time.Minute), Label: t.Name()}}})
	m, err := st.Recv()
	if err != nil || m.GetOpened() == nil {
		t.Fatalf("open: %v %v", m, err)
	}
	sid := m.GetOpened().GetSession()
	t.Cleanup(func() { st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}}) })
	for i := range n {
		send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
			Id: &dlmpb.RequestID{Session: sid, Seq: uint64(i + 1)}, Owner: uint64(i + 1), Resource: name,
			Mode: dlmpb.Mode_MODE_PR, Metadata: []byte(strings.Repeat("m", meta))}}})
	}
	for granted := 0; granted < n; {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetRefused() != nil {
			t.Fatalf("refused: %v", m)
		}
		if m.GetGranted() != nil {
			granted++
		}
	}
}

// TestLsHugeResource: a resource whose listing is larger than a gRPC
// message (4,200 holders with 1 KiB of metadata each, about 5 MB) made
// `dlm ls` fail; the server pages it by locks and ls joins the pages.
func TestLsHugeResource(t *testing.T) {
	addr := sharedServer(t)
	name := t.Name() + "/big"
	const n = 4200
	floodResource(t, addr, name, n, 1024)
	res := list(t, storeFlag(addr), t.Name()+"/")
	if len(res) != 1 || res[0].Resource != name || len(res[0].Holders) != n {
		t.Fatalf("dlm ls: %d resources, the first %q with %d holders; want %s with %d", len(res), res[0].Resource, len(res[0].Holders), name, n)
	}
	seen := map[uint64]bool{}
	for _, h := range res[0].Holders {
		if seen[h.Token] || h.Mode != "PR" {
			t.Fatalf("holder %+v listed twice, or not PR", h)
		}
		seen[h.Token] = true
	}
	code, out, stderr := runDLM(t, nil, "ls", storeFlag(addr), "--prefix", t.Name()+"/")
	if code != 0 || strings.Count(out, "\n") != n+1 {
		t.Fatalf("dlm ls: exit %d, %d lines, want %d; stderr:\n%s", code, strings.Count(out, "\n"), n+1, stderr)
	}
}

// TestLsShowsSessionLabels checks that dlm ls names a dlm server lock's
// holder by its session's label (dlm run's names the command, host and
// pid), in the table and in --json.
func TestLsShowsSessionLabels(t *testing.T) {
	store := storeFlag(sharedServer(t))
	name := "ls-label/" + t.Name()
	holder := startDLM(t, nil, "run", store, "--lock", name, "--", "sh", "-c", holdScript)
	holder.stdout.expect(t, "held", 30*time.Second)
	host, _ := os.Hostname()
	want := fmt.Sprintf("dlm run sh (%s pid %d)", host, holder.cmd.Process.Pid)

	res := list(t, store, name)
	if len(res) != 1 || len(res[0].Holders) != 1 {
		t.Fatalf("ls: %+v", res)
	}
	if h := res[0].Holders[0]; h.SessionLabel != want || h.Session == "" {
		t.Errorf("ls --json holder: session %q label %q, want label %q", h.Session, h.SessionLabel, want)
	}
	code, out, stderr := runDLM(t, nil, "ls", store, "--prefix", name)
	if code != 0 {
		t.Fatalf("dlm ls: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], want) {
		t.Errorf("dlm ls: want the holder's line to show %q:\n%s", want, out)
	}
}

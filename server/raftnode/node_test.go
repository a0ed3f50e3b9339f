package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func propose(t *testing.T, n *Node, cmds ...*dlmpb.Command) []fsm.Result {
	t.Helper()
	rs, err := n.Propose(testCtx(t), cmds...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestNodeRestartDurable: a restarted durable node comes back with its
// sessions and locks, from a snapshot plus the log after it, and its tokens
// keep growing.
func TestNodeRestartDurable(t *testing.T) {
	for _, store := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(store, func(t *testing.T) { testNodeRestartDurable(t, store) })
	}
}

func testNodeRestartDurable(t *testing.T, store string) {
	defer servertest.CheckNoLeaks(t)
	dir := t.TempDir()
	n := openNode(t, Config{Dir: dir, LogStore: store})
	if n.LogStore() != store {
		t.Fatalf("log store %q, want %q", n.LogStore(), store)
	}
	addr := n.Addr()
	rs := propose(t, n, servertest.Open("a"))
	sid := rs[0].Session
	first := propose(t, n, servertest.Lock(sid, 1, "r1", dlmpb.Mode_MODE_EX))[0]
	if first.Status != locktable.StatusGranted || first.Token < first.Index {
		t.Fatalf("lock: %+v", first)
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	second := propose(t, n, servertest.Lock(sid, 2, "r2", dlmpb.Mode_MODE_PR))[0] // only in the log
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = openNode(t, Config{Dir: dir, BindAddr: addr}) // the store the directory holds
	defer n.Close()
	if n.LogStore() != store {
		t.Fatalf("log store after restart %q, want %q", n.LogStore(), store)
	}
	n.FSM().Read(func(v fsm.View) {
		tab := v.Table()
		for _, want := range []fsm.Result{first, second} {
			info, ok := tab.Describe(want.Lock)
			if !ok || info.Token != want.Token || info.State != locktable.LockGranted {
				t.Errorf("lock %d after restart: %+v, %v", want.Lock, info, ok)
			}
		}
	})
	if ss := n.FSM().Sessions(); len(ss) != 1 || ss[0].ID != sid {
		t.Fatalf("sessions after restart: %v", ss)
	}
	// A retry of a request sent before the restart is still deduplicated.
	if r := propose(t, n, servertest.Lock(sid, 2, "r2", dlmpb.Mode_MODE_PR))[0]; !r.Duplicate || r.Lock != second.Lock {
		t.Fatalf("retry after restart: %+v", r)
	}
	third := propose(t, n, servertest.Lock(sid, 3, "r3", dlmpb.Mode_MODE_EX))[0]
	if third.Token <= second.Token || third.Token < third.Index {
		t.Fatalf("token after restart %d, before %d", third.Token, second.Token)
	}
}

// TestNodeInMemoryForgets: an in-memory node starts empty after a restart
// (by design: no durable log, no snapshot files).
func TestNodeInMemoryForgets(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{InMemory: true})
	propose(t, n, servertest.Open("a"))
	if len(n.FSM().Sessions()) != 1 {
		t.Fatal("session not applied")
	}
	n.Close()
	n = openNode(t, Config{InMemory: true})
	defer n.Close()
	if ss := n.FSM().Sessions(); len(ss) != 0 {
		t.Fatalf("in-memory node kept %v", ss)
	}
}

// TestProposeBatching: concurrent proposals share Raft entries, every
// caller gets its own results, and tokens follow the log.
func TestProposeBatching(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{Dir: t.TempDir()})
	defer n.Close()
	const workers, each = 64, 20
	opens := make([]*dlmpb.Command, workers)
	for w := range opens {
		opens[w] = servertest.Open(fmt.Sprint("w", w))
	}
	sessions := propose(t, n, opens...)

	start := n.raft.LastIndex()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	results := make([][]fsm.Result, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				rs, err := n.Propose(testCtx(t), servertest.Lock(sessions[w].Session, uint64(i+1), fmt.Sprintf("w%d-%d", w, i), dlmpb.Mode_MODE_EX))
				if err != nil {
					errs <- err
					return
				}
				if len(rs) != 1 || rs[0].Err != nil || rs[0].Status != locktable.StatusGranted {
					errs <- fmt.Errorf("worker %d: %+v", w, rs)
					return
				}
				results[w] = append(results[w], rs[0])
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	entries := n.raft.LastIndex() - start
	if entries >= workers*each {
		t.Fatalf("%d commands took %d entries: no batching", workers*each, entries)
	}
	t.Logf("%d commands in %d raft entries", workers*each, entries)

	tokens := map[uint64]bool{}
	for _, rs := range results {
		for i, r := range rs {
			if tokens[r.Token] || r.Token < r.Index || (i > 0 && r.Token <= rs[i-1].Token) {
				t.Fatalf("bad token %d at index %d", r.Token, r.Index)
			}
			tokens[r.Token] = true
		}
	}
}

// TestProposeErrors: context, closed node and encoding errors.
func TestProposeErrors(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{InMemory: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Propose(ctx, servertest.Open("a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	bad := servertest.Lock(1, 0, "\xff\xfe", dlmpb.Mode_MODE_EX) // not UTF-8
	if _, err := n.Propose(testCtx(t), bad); err == nil {
		t.Fatal("invalid UTF-8 resource encoded")
	}
	if rs, err := n.Propose(testCtx(t)); rs != nil || err != nil {
		t.Fatalf("empty propose: %v, %v", rs, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Propose(testCtx(t), servertest.Open("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if n.IsLeader() {
		t.Fatal("closed node leads")
	}
}

// TestCloseWithProposalsInFlight: Close while proposers are busy ends every
// call with a result or an error, and leaks nothing.
func TestCloseWithProposalsInFlight(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{Dir: t.TempDir()})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				_, err := n.Propose(context.Background(), servertest.Open("x"))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, ErrLeadershipLost) {
					t.Error(err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestSubmitTellsEachOutcomeOnce: Submit returns at once and the node calls
// each proposal's done exactly once: while it runs, with the results, in
// submission order; at Close, with the results or an error, before Close
// returns; after Close, never (Submit fails).
func TestSubmitTellsEachOutcomeOnce(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{InMemory: true})
	type call struct {
		i       int
		results []fsm.Result
		err     error
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	all := make(chan struct{}, 1)
	submit := func(i, want int) error {
		return n.Submit(testCtx(t), func(rs []fsm.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{i, rs, err})
			if len(calls) == want {
				all <- struct{}{}
			}
		}, servertest.Open(fmt.Sprint("s", i)))
	}
	const count = 200
	for i := range count {
		if err := submit(i, count); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-testCtx(t).Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d proposals answered", len(calls), count)
	}
	mu.Lock()
	for k, c := range calls {
		if c.i != k || c.err != nil || len(c.results) != 1 || c.results[0].Session == 0 ||
			(k > 0 && c.results[0].Index < calls[k-1].results[0].Index) {
			t.Fatalf("call %d: %+v, want proposal %d applied after the one before", k, c, k)
		}
	}
	calls = nil
	mu.Unlock()

	// At Close: every proposal is answered once, before Close returns.
	for i := range count {
		if err := submit(i, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	seen := map[int]bool{}
	for _, c := range calls {
		if seen[c.i] {
			t.Fatalf("proposal %d answered twice", c.i)
		}
		seen[c.i] = true
		if c.err != nil && !errors.Is(c.err, ErrClosed) && !errors.Is(c.err, ErrLeadershipLost) {
			t.Fatalf("proposal %d: %v", c.i, c.err)
		}
	}
	if len(seen) != count {
		t.Fatalf("%d of %d proposals answered by Close", len(seen), count)
	}
	mu.Unlock()
	if err := submit(count, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != count {
		t.Fatal("done called for a proposal Submit refused")
	}
}

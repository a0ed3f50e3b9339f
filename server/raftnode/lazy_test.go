package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// A lazy proposal waits for company: the next proposal shares its entry,
// after it. Alone, it is applied once its window has passed, or at once
// when someone settles the node.
func TestSubmitLazy(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{InMemory: true})
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := n.Propose(ctx, servertest.Open("lazy"))
	if err != nil {
		t.Fatal(err)
	}
	sid := rs[0].Session
	lock := func(res string) fsm.Result {
		t.Helper()
		rs, err := n.Propose(ctx, servertest.Lock(sid, 0, res, dlmpb.Mode_MODE_EX))
		if err != nil || rs[0].Err != nil {
			t.Fatalf("lock %s: %v %v", res, err, rs)
		}
		return rs[0]
	}
	submitLazy := func(c *dlmpb.Command) <-chan fsm.Result {
		t.Helper()
		out := make(chan fsm.Result, 1)
		if err := n.SubmitLazy(ctx, time.Hour, func(rs []fsm.Result, err error) {
			if err != nil {
				t.Errorf("lazy proposal: %v", err)
			}
			out <- rs[0]
		}, c); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// With company: one entry, the lazy proposal first.
	a := lock("a")
	rel := submitLazy(servertest.Release(sid, a.Lock))
	b := lock("a") // granted: the release came first
	r := <-rel
	if r.Err != nil || r.Index != b.Index {
		t.Fatalf("release at index %d (%v), the next lock at %d: want one entry", r.Index, r.Err, b.Index)
	}

	// Alone: Settle cuts it.
	rel = submitLazy(servertest.Release(sid, b.Lock))
	select {
	case r := <-rel:
		t.Fatalf("a lazy proposal alone was applied at once (index %d), with an hour's window", r.Index)
	default:
	}
	if err := n.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-rel:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	default:
		t.Fatal("Settle returned before the lazy proposal was applied")
	}
}

// Alone and unsettled, a lazy proposal is applied once its window passes.
func TestSubmitLazyWindow(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	n := openNode(t, Config{InMemory: true})
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	if err := n.SubmitLazy(ctx, 5*time.Millisecond, func(_ []fsm.Result, err error) { done <- err }, servertest.Open("alone")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("a lazy proposal alone was never applied")
	}
}

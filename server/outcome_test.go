package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/raftnode"
)

// A stream's request holds an inflight slot until the node reports its
// outcome, and the reader waits while none is free. An applied request's
// outcome only gives its slot back (its answer comes through the hub); a
// failed one's also refuses it, with REASON_NOT_LEADER and its id.
func TestStreamOutcomeReportsOnlyFailures(t *testing.T) {
	ob := newOutbox(1, 100, 1<<20, newQueueBudget(1<<20))
	slots := make(inflight, 2)
	ctx := context.Background()
	for range 2 {
		if err := slots.take(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := slots.take(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("take with every slot taken: %v, want the context's error", err)
	}

	outcome(ob, protocol.RequestID(1, 7), slots)([]fsm.Result{{Index: 3}}, nil)
	if msgs, _, _ := ob.take(nil); len(msgs) != 0 {
		t.Fatalf("an applied request's outcome queued %v", msgs)
	}
	if err := slots.take(done); err != nil { // a free slot is taken even with ctx ended
		t.Fatalf("the applied request's slot was not given back: %v", err)
	}

	outcome(ob, protocol.RequestID(1, 8), slots)(nil, raftnode.ErrLeadershipLost)
	msgs, _, _ := ob.take(nil)
	if len(msgs) != 1 || msgs[0].GetRefused().GetReason() != dlmpb.Reason_REASON_NOT_LEADER ||
		msgs[0].GetRefused().GetId().GetSeq() != 8 || msgs[0].GetRefused().GetId().GetSession() != 1 {
		t.Fatalf("a failed request's outcome queued %v, want its refusal (NOT_LEADER)", msgs)
	}
	if len(slots) != 1 {
		t.Fatalf("%d slots taken after both outcomes, want 1", len(slots))
	}
}

// With one request in flight per stream, a stream's requests are still all
// taken and answered, in order: each outcome gives its slot back.
func TestStreamInflightOfOne(t *testing.T) {
	s := startServer(t, Config{MaxStreamInflight: 1})
	r, _ := open(t, s, 0, time.Minute)
	const n = 50
	for i := range n {
		r.lock(fmt.Sprint("one/", i), dlmpb.Mode_MODE_EX)
	}
	for i := range n {
		r.granted(uint64(i + 1))
	}
}

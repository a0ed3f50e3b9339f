package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
)

func grantedMsg(lock uint64) *dlmpb.SessionResponse {
	return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Granted{Granted: &dlmpb.Granted{LockId: lock}}}
}

// A client that does not read its events has its stream ended once the
// queue passes its limit; the stream's status is ResourceExhausted.
func TestOutboxEndsASlowClient(t *testing.T) {
	ob := newOutbox(1, 3, 1<<20, newQueueBudget(1<<30))
	msg := grantedMsg(1)
	ob.push(msg, msg, msg)
	if msgs, ended, _ := ob.take(nil); len(msgs) != 3 || ended {
		t.Fatalf("take = %d messages, ended %v; want 3, open", len(msgs), ended)
	}
	ob.push(msg, msg)
	ob.push(msg, msg) // 4 > 3
	msgs, ended, err := ob.take(nil)
	if !ended || len(msgs) != 0 || !errors.Is(err, errSlowClient) {
		t.Fatalf("take = %d messages, ended %v, %v; want the slow client's end", len(msgs), ended, err)
	}
	if code := status.Code(endStatus(err)); code != codes.ResourceExhausted {
		t.Fatalf("stream status %v, want ResourceExhausted", code)
	}
	ob.push(msg) // ignored after the end
	if msgs, _, _ := ob.take(nil); len(msgs) != 0 {
		t.Fatal("a push after the end was queued")
	}
}

// An end with drain still delivers what was queued (SessionExpired last).
func TestOutboxDrainsOnExpiry(t *testing.T) {
	ob := newOutbox(1, 10, 1<<20, newQueueBudget(1<<30))
	ob.push(&dlmpb.SessionResponse{}, &dlmpb.SessionResponse{})
	ob.end(true, nil)
	msgs, ended, err := ob.take(nil)
	if len(msgs) != 2 || !ended || err != nil {
		t.Fatalf("take = %d, %v, %v; want 2 queued messages and a clean end", len(msgs), ended, err)
	}
}

// A queue is bounded by bytes (each message costs its encoded size plus
// StreamMessageOverhead) as well as by messages; ending it returns its
// bytes to the server's budget.
func TestOutboxBoundsBytes(t *testing.T) {
	msg := grantedMsg(7)
	cost := messageCost(msg)
	if cost != int64(len(mustMarshal(t, msg)))+StreamMessageOverhead {
		t.Fatalf("cost %d is not the encoded size plus %d", cost, StreamMessageOverhead)
	}
	budget := newQueueBudget(1 << 30)
	ob := newOutbox(1, 1000, 3*cost, budget)
	ob.push(msg, msg)
	ob.push(msg)
	if got := budget.used(); got != 3*cost {
		t.Fatalf("budget used %d, want %d", got, 3*cost)
	}
	ob.push(msg) // 4 x cost > 3 x cost
	msgs, ended, err := ob.take(nil)
	if !ended || len(msgs) != 0 || !errors.Is(err, errSlowClient) {
		t.Fatalf("take = %d messages, ended %v, %v; want the slow client's end", len(msgs), ended, err)
	}
	if want := fmt.Sprintf("the limit is %d bytes", 3*cost); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "session survives") {
		t.Fatalf("error %q: want %q and that the session survives", err, want)
	}
	if got := budget.used(); got != 0 {
		t.Fatalf("budget used %d after the end, want 0", got)
	}
	if budget.slowed.Load() != 1 {
		t.Fatalf("%d slow ends counted, want 1", budget.slowed.Load())
	}
}

func mustMarshal(t *testing.T, m *dlmpb.SessionResponse) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// One message always fits an empty queue, however large (a session's
// sync can be); the next one then ends the stream.
func TestOutboxTakesOneLargeMessageWhenEmpty(t *testing.T) {
	sync := &dlmpb.SessionSync{}
	for i := range 1000 {
		sync.Locks = append(sync.Locks, &dlmpb.LockInfo{LockId: uint64(i + 1), Resource: "some/resource/name"})
	}
	big := &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Sync{Sync: sync}}
	budget := newQueueBudget(1 << 30)
	ob := newOutbox(1, 1000, 4096, budget)
	ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Opened{Opened: &dlmpb.SessionOpened{Session: 1}}}, big)
	if msgs, ended, _ := ob.take(nil); len(msgs) != 2 || ended {
		t.Fatalf("take = %d messages, ended %v; want both, open", len(msgs), ended)
	}
	ob.push(grantedMsg(1)) // the sync is still being sent: it counts
	if _, ended, err := ob.take(nil); !ended || !errors.Is(err, errSlowClient) {
		t.Fatalf("ended %v, %v; want the slow client's end", ended, err)
	}
	if got := budget.used(); got != 0 {
		t.Fatalf("budget used %d after the end, want 0", got)
	}
}

// Taken messages count until the writer reports them sent.
func TestOutboxCountsBytesUntilSent(t *testing.T) {
	msg := grantedMsg(1)
	cost := messageCost(msg)
	budget := newQueueBudget(1 << 30)
	ob := newOutbox(1, 1000, 3*cost, budget)
	ob.push(msg, msg)
	msgs, _, _ := ob.take(nil)
	if got := budget.used(); got != 2*cost {
		t.Fatalf("budget used %d with 2 messages being sent, want %d", got, 2*cost)
	}
	ob.sent(msgs)
	if got := budget.used(); got != 0 {
		t.Fatalf("budget used %d after sending, want 0", got)
	}
	ob.push(msg, msg, msg) // the room came back
	if ob.isEnded() {
		t.Fatal("ended with room for three messages")
	}
	// An end with drain whose writer stops early returns the bytes at close.
	ob.end(true, nil)
	ob.close()
	if got := budget.used(); got != 0 {
		t.Fatalf("budget used %d after close, want 0", got)
	}
}

// The server-wide budget: the stream whose message would pass it is ended,
// others keep their queues; the budget never passes its limit.
func TestOutboxServerWideBudget(t *testing.T) {
	msg := grantedMsg(1)
	cost := messageCost(msg)
	budget := newQueueBudget(3 * cost)
	a := newOutbox(1, 1000, 1<<20, budget)
	b := newOutbox(2, 1000, 1<<20, budget)
	a.push(msg, msg)
	b.push(msg, msg)
	if a.isEnded() || !b.isEnded() {
		t.Fatalf("ended a %v, b %v; want only b", a.isEnded(), b.isEnded())
	}
	_, _, err := b.take(nil)
	if !errors.Is(err, errSlowClient) || !strings.Contains(err.Error(), "all streams") {
		t.Fatalf("b ended with %v; want the server-wide bound", err)
	}
	if budget.used() != 2*cost || budget.peak() > 3*cost {
		t.Fatalf("budget used %d, peak %d; want %d, at most %d", budget.used(), budget.peak(), 2*cost, 3*cost)
	}
	a.end(false, nil)
	if budget.used() != 0 {
		t.Fatalf("budget used %d after both ended, want 0", budget.used())
	}
}

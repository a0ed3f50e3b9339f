package redlock

import (
	"errors"
	"testing"
	"time"
)

// TestWaiterDatesHandovers checks the arithmetic of waiter.grant on five
// nodes whose clocks read 1 s (in µs) when the waiter's attempt, sent at
// sent, reached them, and which handed the lock over 100 ms later by their
// clocks: the grant starts at sent + 100 ms less 1% (the drift factor),
// and only handovers after the waiter's last attempt and undo on a node,
// from nodes whose undo answered, count.
func TestWaiterDatesHandovers(t *testing.T) {
	const clock, later = 1_000_000, 1_100_000
	const ttl, drift, rate = time.Minute, 10 * time.Millisecond, 0.01
	fresh := func() (*waiter, time.Time) {
		w := &waiter{nodes: make([]nodeView, 5)}
		sent := time.Now().Add(-time.Second)
		for i := range w.nodes {
			w.answered(i, sent, clock)
		}
		return w, sent
	}

	w, sent := fresh()
	for i, tok := range []uint64{7, 9, 8} {
		if _, ok, late := w.grant(3, ttl, drift, rate); ok || late {
			t.Fatalf("granted on %d handovers of 5 (late %v)", i, late)
		}
		w.handedOver(i, handover{token: tok, at: later + uint64(i)})
	}
	g, ok, _ := w.grant(3, ttl, drift, rate)
	if !ok {
		t.Fatal("three handovers of five are not a grant")
	}
	if want := sent.Add(99 * time.Millisecond); !g.Start.Equal(want) {
		t.Fatalf("the grant starts %s after the attempt was sent, want %s", g.Start.Sub(sent), want.Sub(sent))
	}
	if g.Token != 9 {
		t.Fatalf("token %d, want the largest of the handovers', 9", g.Token)
	}
	if _, ok, late := w.grant(3, 50*time.Millisecond, drift, rate); ok || !late {
		t.Fatalf("a grant with no validity left: ok %v, late %v; want late", ok, late)
	}

	// A handover from before an undo on its node, or from a node whose
	// undo did not answer, does not count.
	w, _ = fresh()
	for i := range 3 {
		w.handedOver(i, handover{token: 1, at: later})
	}
	w.undone(0, later, nil)
	if _, ok, _ := w.grant(3, ttl, drift, rate); ok {
		t.Fatal("a handover from no later than an undo on its node counted")
	}
	w.handedOver(0, handover{token: 1, at: later + 1})
	w.undone(1, 0, errors.New("no answer"))
	if _, ok, _ := w.grant(3, ttl, drift, rate); ok {
		t.Fatal("a handover from a node whose undo did not answer counted")
	}

	// Nor does one from a node that never answered an attempt.
	w = &waiter{nodes: make([]nodeView, 5)}
	for i := range 5 {
		w.handedOver(i, handover{token: 1, at: later})
	}
	if _, ok, _ := w.grant(3, ttl, drift, rate); ok {
		t.Fatal("handovers from nodes that never answered an attempt counted")
	}
}

func TestParseHandover(t *testing.T) {
	if h := parseHandover("12 34"); h == nil || *h != (handover{token: 12, at: 34}) {
		t.Fatalf("parseHandover(%q) = %v", "12 34", h)
	}
	for _, msg := range []string{"1", "stop", "x 1", "1 x", ""} {
		if h := parseHandover(msg); h != nil {
			t.Fatalf("parseHandover(%q) = %v, want a wake-up", msg, h)
		}
	}
}

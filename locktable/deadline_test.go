package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestWaitTimeouts(t *testing.T) {
	h := newTest(t, 4, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	if _, ok := h.t.NextDeadline(); ok {
		t.Fatal("deadline with nothing queued")
	}
	b := wantStatus(t, h.lock(LockRequest{Session: 2, Resource: "x", Mode: driver.EX, Deadline: 100}), StatusQueued)
	c := wantStatus(t, h.lock(LockRequest{Session: 3, Resource: "x", Mode: driver.PW, Deadline: 50}), StatusQueued)
	h.queuedLock(4, "x", driver.PR) // behind B, no deadline
	if d, ok := h.t.NextDeadline(); !ok || d != 50 {
		t.Fatalf("NextDeadline = %d, %v", d, ok)
	}
	wantEvents(t, h.advance(49))
	wantEvents(t, h.advance(50), "TimedOut#3")
	if d, ok := h.t.NextDeadline(); !ok || d != 100 {
		t.Fatalf("NextDeadline = %d, %v", d, ok)
	}
	// B times out; D's PR, compatible with A's, is granted in the same step.
	wantEvents(t, h.advance(500), "TimedOut#2", "Granted#4 PR")
	if _, ok := h.t.NextDeadline(); ok {
		t.Fatal("deadline left")
	}
	if _, ok := h.t.Describe(b); ok {
		t.Fatal("timed-out request still exists")
	}
	_, _ = a, c
}

func TestConversionTimeout(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	h.grantedLock(2, "x", driver.PR)
	wantStatus(t, h.convert(ConvertRequest{Session: 1, Lock: a, Mode: driver.EX, Deadline: 10}), StatusQueued)
	wantEvents(t, h.advance(10), "TimedOut#1 conv")
	if st, m := h.state(a); st != LockGranted || m != driver.PR {
		t.Fatalf("timed-out conversion left %v %v", st, m)
	}
}

// TestLazyTimeout: a head whose deadline passed is never granted, even if
// Advance was not called.
func TestLazyTimeout(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.EX)
	wantStatus(t, h.lock(LockRequest{Session: 2, Resource: "x", Mode: driver.EX, Deadline: 10}), StatusQueued)
	h.queuedLock(3, "x", driver.EX)
	h.now = 20
	wantEvents(t, h.release(1, a), "Released#1", "TimedOut#2", "Granted#3 EX")
}

// TestClockNeverGoesBack: the table clock is the maximum Stamp.Now seen.
func TestClockNeverGoesBack(t *testing.T) {
	tb := New(Limits{})
	tb.OpenSession(Stamp{Now: 100}, 1, "")
	tb.Advance(Stamp{Now: 50})
	if tb.Now() != 100 {
		t.Fatalf("clock went back to %d", tb.Now())
	}
	r, err := tb.Lock(Stamp{Now: 60}, LockRequest{Session: 1, Resource: "x", Mode: driver.EX})
	if err != nil {
		t.Fatal(err)
	}
	if li, _ := tb.Describe(r.Lock); li.GrantedAt != 100 {
		t.Fatalf("granted at %d", li.GrantedAt)
	}
}

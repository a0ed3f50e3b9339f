package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestNoBarging(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	b := h.queuedLock(2, "x", driver.EX)
	// PR is compatible with the granted PR, but an EX waits ahead of it.
	c := h.queuedLock(3, "x", driver.PR)
	wantEvents(t, h.release(1, a), "Released#1", "Granted#2 EX", "Blocking#2 PR")
	wantEvents(t, h.release(2, b), "Released#2", "Granted#3 PR")
	if st, _ := h.state(c); st != LockGranted {
		t.Fatalf("lock %d is %v", c, st)
	}
}

func TestFIFOAndGroupGrant(t *testing.T) {
	h := newTest(t, 6, Limits{})
	a := h.grantedLock(1, "x", driver.EX)
	h.queuedLock(2, "x", driver.PR)
	h.queuedLock(3, "x", driver.PR)
	h.queuedLock(4, "x", driver.EX)
	h.queuedLock(5, "x", driver.PR) // compatible with 2 and 3 but behind 4
	r := h.release(1, a)
	wantEvents(t, r, "Released#1", "Granted#2 PR", "Granted#3 PR", "Blocking#2 EX", "Blocking#3 EX")
	if r.Events[1].Token >= r.Events[2].Token {
		t.Fatalf("tokens of one operation not increasing: %v", r.Events)
	}
	wantEvents(t, h.release(2, 2), "Released#2")
	wantEvents(t, h.release(3, 3), "Released#3", "Granted#4 EX", "Blocking#4 PR")
	wantEvents(t, h.release(4, 4), "Released#4", "Granted#5 PR")
}

func TestConversionsAheadOfNewRequests(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	b := h.grantedLock(2, "x", driver.PR)
	h.queuedLock(3, "x", driver.EX) // lock 3, blocked by both PR
	// B converts to EX: it waits for A only, and goes ahead of lock 3.
	wantStatus(t, h.cv(2, b, driver.EX), StatusQueued)
	wantEvents(t, h.release(1, a), "Released#1", "Granted#2 EX conv", "Blocking#2 EX")
	if st, m := h.state(b); st != LockGranted || m != driver.EX {
		t.Fatalf("lock 2 is %v %v", st, m)
	}
	wantEvents(t, h.release(2, b), "Released#2", "Granted#3 EX")
}

func TestConversionUpAndDown(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.NL)
	b := h.grantedLock(2, "x", driver.PR)
	before, _ := h.t.Describe(a)
	// NL→PR is compatible with B's PR: granted in place, new token.
	r := h.cv(1, a, driver.PR)
	wantStatus(t, r, StatusGranted)
	if r.Token <= before.Token {
		t.Fatalf("up-conversion token %d not above %d", r.Token, before.Token)
	}
	// PR→EX must wait for B.
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued)
	if st, m := h.state(a); st != LockConverting || m != driver.PR {
		t.Fatalf("converting lock is %v %v", st, m)
	}
	wantEvents(t, h.release(2, b), "Released#2", "Granted#1 EX conv")
	// New PR requests wait on the EX.
	c := h.queuedLock(3, "x", driver.PR)
	d := h.queuedLock(2, "x", driver.PR)
	// EX→PR is a down-conversion: immediate, same token, and it wakes the
	// PR waiters.
	ex, _ := h.t.Describe(a)
	r = h.cv(1, a, driver.PR)
	wantEvents(t, r, "Granted#1 PR conv", "Granted#3 PR", "Granted#4 PR")
	if r.Token != ex.Token || r.Events[0].Token != ex.Token {
		t.Fatalf("down-conversion changed the token: %d → %d", ex.Token, r.Token)
	}
	// Converting to the same mode changes nothing.
	wantEvents(t, h.cv(1, a, driver.PR))
	// PR→NL, then NL→CR, all immediate.
	wantStatus(t, h.cv(1, a, driver.NL), StatusGranted)
	wantStatus(t, h.cv(1, a, driver.CR), StatusGranted)
	_, _ = c, d
}

// TestMiddleConversionUnblocks: PR→CW is neither up nor down; leaving PR
// can unblock a queued CW request.
func TestMiddleConversionUnblocks(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	h.queuedLock(2, "x", driver.CW)
	wantEvents(t, h.cv(1, a, driver.CW), "Granted#1 CW conv", "Granted#2 CW")
}

// TestInPlaceConversion shows the VMS rule: a compatible conversion is
// granted in place even while another conversion is queued, unless it asks
// for QueueConvert.
func TestInPlaceConversion(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.NL)
	b := h.grantedLock(2, "x", driver.CR)
	c := h.grantedLock(3, "x", driver.NL)
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued) // waits for B's CR
	// C's NL→CR is compatible with every granted mode: in place, although
	// it will now also block A.
	wantEvents(t, h.cv(3, c, driver.CR), "Granted#3 CR conv", "Blocking#3 EX")
	wantStatus(t, h.cv(3, c, driver.NL), StatusGranted)
	// With QueueConvert it waits behind A's conversion instead.
	wantStatus(t, h.convert(ConvertRequest{Session: 3, Lock: c, Mode: driver.CR, Flags: QueueConvert}), StatusQueued)
	wantEvents(t, h.release(2, b), "Released#2", "Granted#1 EX conv", "Blocking#1 CR")
	wantEvents(t, h.release(1, a), "Released#1", "Granted#3 CR conv")
	// With QueueConvert, B's CR→PR conversion behind a queued NL→EX would
	// wait for A, which waits for B's CR: a deadlock.
	h2 := newTest(t, 2, Limits{})
	a = h2.grantedLock(1, "y", driver.NL)
	b = h2.grantedLock(2, "y", driver.CR)
	wantStatus(t, h2.cv(1, a, driver.EX), StatusQueued)
	wantErr(t, h2.convert(ConvertRequest{Session: 2, Lock: b, Mode: driver.PR, Flags: QueueConvert}), ErrDeadlock)
	wantStatus(t, h2.cv(2, b, driver.PR), StatusGranted) // in place: fine
}

func TestNoQueue(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	b := h.grantedLock(2, "x", driver.PR)
	wantErr(t, h.lock(LockRequest{Session: 2, Resource: "x", Mode: driver.EX, Flags: NoQueue}), ErrWouldBlock)
	// A deadline already passed means "do not wait" as well.
	h.now = 100
	wantErr(t, h.lock(LockRequest{Session: 2, Resource: "x", Mode: driver.EX, Deadline: 100}), ErrWouldBlock)
	// A try-conversion fails and leaves the lock as it was.
	wantErr(t, h.convert(ConvertRequest{Session: 1, Lock: a, Mode: driver.EX, Flags: NoQueue}), ErrWouldBlock)
	if st, m := h.state(a); st != LockGranted || m != driver.PR {
		t.Fatalf("lock is %v %v", st, m)
	}
	// A try-lock behind a queue fails too (no barging).
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued)
	wantErr(t, h.lock(LockRequest{Session: 2, Resource: "x", Mode: driver.NL, Flags: NoQueue}), ErrWouldBlock)
	// Nothing was queued by the failures.
	if ri, _ := h.t.Resource("x"); len(ri.Waiting) != 0 || len(ri.Converting) != 1 {
		t.Fatalf("queues: %+v", ri)
	}
	_ = b
}

func TestCancel(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	b := h.grantedLock(2, "x", driver.PR)
	c := h.queuedLock(3, "x", driver.EX)
	d := h.queuedLock(3, "x", driver.PR)
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued)
	wantErr(t, h.cancel(2, b), ErrNotPending)
	// Cancelling the conversion leaves A at PR; nothing is granted since
	// C's EX is next in line.
	wantEvents(t, h.cancel(1, a), "Cancelled#1 conv")
	if st, m := h.state(a); st != LockGranted || m != driver.PR {
		t.Fatalf("lock is %v %v", st, m)
	}
	// Cancelling C lets D (PR) through.
	wantEvents(t, h.cancel(3, c), "Cancelled#3", "Granted#4 PR")
	if _, ok := h.t.Describe(c); ok {
		t.Fatal("cancelled request still exists")
	}
	_ = d
}

func TestReleaseQueuedRequest(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.EX)
	b := h.queuedLock(2, "x", driver.EX)
	wantEvents(t, h.release(2, b), "Cancelled#2")
	wantStatus(t, h.cv(1, a, driver.NL), StatusGranted)
	h.grantedLock(2, "x", driver.EX) // NL blocks nothing
}

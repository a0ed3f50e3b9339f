package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// TestConversionDeadlock is the classic case: two PR holders both convert
// to EX. The second is refused and stays PR.
func TestConversionDeadlock(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	b := h.grantedLock(2, "x", driver.PR)
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued)
	r := h.cv(2, b, driver.EX)
	wantErr(t, r, ErrDeadlock)
	if st, m := h.state(b); st != LockGranted || m != driver.PR {
		t.Fatalf("refused conversion left lock %v %v", st, m)
	}
	wantEvents(t, h.release(2, b), "Released#2", "Granted#1 EX conv")
}

func TestDeadlockCycleOfTwo(t *testing.T) {
	h := newTest(t, 2, Limits{})
	h.grantedLock(1, "x", driver.EX)
	h.grantedLock(2, "y", driver.EX)
	h.queuedLock(1, "y", driver.EX)
	wantErr(t, h.lk(2, "x", driver.EX), ErrDeadlock)
	// A compatible request of the same owner is no cycle... but NL
	// requests still queue behind nothing here, so they are granted.
	h.grantedLock(2, "x", driver.NL)
}

func TestDeadlockCycleOfThree(t *testing.T) {
	h := newTest(t, 3, Limits{})
	h.grantedLock(1, "x", driver.EX)
	h.grantedLock(2, "y", driver.PW)
	h.grantedLock(3, "z", driver.EX)
	h.queuedLock(1, "y", driver.PR)
	h.queuedLock(2, "z", driver.CR)
	wantErr(t, h.lk(3, "x", driver.CW), ErrDeadlock)
	// Not a cycle: session 3 asking for y waits on 2, which waits on 3...
	// that is a cycle too; asking for a fresh resource is not.
	wantErr(t, h.lk(3, "y", driver.EX), ErrDeadlock)
	h.grantedLock(3, "w", driver.EX)
}

// TestDeadlockOwners: owners, not sessions, are the nodes of the graph.
func TestDeadlockOwners(t *testing.T) {
	h := newTest(t, 1, Limits{})
	h.lock(LockRequest{Session: 1, Owner: 1, Resource: "x", Mode: driver.EX})
	h.lock(LockRequest{Session: 1, Owner: 2, Resource: "y", Mode: driver.EX})
	wantStatus(t, h.lock(LockRequest{Session: 1, Owner: 1, Resource: "y", Mode: driver.EX}), StatusQueued)
	wantErr(t, h.lock(LockRequest{Session: 1, Owner: 2, Resource: "x", Mode: driver.EX}), ErrDeadlock)
	// Another owner of the same session just waits.
	wantStatus(t, h.lock(LockRequest{Session: 1, Owner: 3, Resource: "x", Mode: driver.EX}), StatusQueued)
}

// TestSelfDeadlock: an owner waiting on a lock it holds itself.
func TestSelfDeadlock(t *testing.T) {
	h := newTest(t, 1, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	wantErr(t, h.lk(1, "x", driver.EX), ErrDeadlock)
	// Two locks of one owner, one converting against the other.
	b := h.grantedLock(1, "x", driver.PR)
	wantErr(t, h.cv(1, a, driver.EX), ErrDeadlock)
	h.release(1, b)
	wantStatus(t, h.cv(1, a, driver.EX), StatusGranted)
}

// TestDeadlockThroughConversionQueue: the head of the wait queue waits on
// the conversion queue, so a conversion can close a cycle through it.
func TestDeadlockThroughConversionQueue(t *testing.T) {
	h := newTest(t, 4, Limits{})
	a := h.grantedLock(1, "x", driver.NL)
	h.grantedLock(3, "x", driver.CR) // D
	h.grantedLock(4, "x", driver.CW) // E
	h.grantedLock(2, "y", driver.EX) // B
	h.queuedLock(2, "x", driver.PR)  // B waits on E's CW only
	h.queuedLock(3, "y", driver.EX)  // D waits on B
	// A's conversion would wait on D's CR; D waits on B, and B's request,
	// at the head of the wait queue, would wait behind A's conversion.
	wantErr(t, h.cv(1, a, driver.EX), ErrDeadlock)
	// Converting to CW waits on nobody but... D's CR is compatible: in place.
	wantStatus(t, h.cv(1, a, driver.CW), StatusGranted)
}

// TestInPlaceConversionDeadlock: a conversion granted in place must not
// block a request whose owner the converter waits on.
func TestInPlaceConversionDeadlock(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.NL)
	h.grantedLock(3, "x", driver.CR)
	h.grantedLock(2, "y", driver.EX)
	h.queuedLock(2, "x", driver.EX) // B waits on C's CR
	h.queuedLock(1, "y", driver.EX) // A waits on B
	wantErr(t, h.cv(1, a, driver.CR), ErrDeadlock)
	if _, m := h.state(a); m != driver.NL {
		t.Fatalf("refused conversion changed the mode to %v", m)
	}
	// NL→NL is no change, and a mode B does not conflict with is fine...
	// EX conflicts with everything but NL, so nothing else can be tried.
}

// TestDeadlockSearchBudget: a search that runs out finds nothing, and
// the request is queued.
func TestDeadlockSearchBudget(t *testing.T) {
	h := newTest(t, 3, Limits{MaxDeadlockSearch: 1})
	h.grantedLock(1, "x", driver.EX)
	h.grantedLock(2, "y", driver.EX)
	h.grantedLock(3, "z", driver.EX)
	h.queuedLock(1, "y", driver.EX)
	h.queuedLock(2, "z", driver.EX)
	h.acyclic = false
	wantStatus(t, h.lk(3, "x", driver.EX), StatusQueued)
	if c := findCycle(h.t); c == nil {
		t.Fatal("expected the cycle the budget let through")
	}
}

func TestSemaphoreDeadlock(t *testing.T) {
	h := newTest(t, 2, Limits{})
	sem := func(s SessionID, n uint32) res {
		return h.acquire(SemaphoreRequest{Session: s, Resource: "s", Capacity: 2, Permits: n})
	}
	wantStatus(t, sem(1, 1), StatusGranted)
	// Waiting for 2 of 2 permits while holding one can never succeed.
	wantErr(t, sem(1, 2), ErrDeadlock)
	wantStatus(t, sem(2, 1), StatusGranted)
	// One more permit could come from session 2: a wait, not a deadlock.
	wantStatus(t, sem(1, 1), StatusQueued)
	// Session 2 asking for one more permit behind it is a deadlock too
	// (each waits for a permit only the other could release), but waiting
	// for "any" release is not modelled: only holders whose permits are
	// indispensable are edges. The deadline is the backstop.
	wantStatus(t, sem(2, 1), StatusQueued)
}

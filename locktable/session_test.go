package locktable

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestSessions(t *testing.T) {
	h := newHarness(t, Limits{})
	wantErr(t, res{err: h.open(0)}, ErrInvalidArgument)
	if err := h.open(7); err != nil {
		t.Fatal(err)
	}
	wantErr(t, res{err: h.open(7)}, ErrSessionExists)
	wantErr(t, h.close(8), ErrUnknownSession)
	wantErr(t, h.lk(8, "x", driver.EX), ErrUnknownSession)
	wantEvents(t, h.close(7), "SessionClosed s7")
	wantErr(t, h.close(7), ErrUnknownSession)
	wantEvents(t, h.expire(7, 9)) // unknown ids are ignored
}

func TestCloseSession(t *testing.T) {
	h := newTest(t, 3, Limits{})
	h.grantedLock(1, "x", driver.PR)      // 1
	b := h.grantedLock(2, "x", driver.PR) // 2
	h.queuedLock(3, "x", driver.EX)       // 3
	h.grantedLock(1, "y", driver.EX)      // 4
	h.queuedLock(2, "y", driver.PR)       // 5
	wantStatus(t, h.cv(2, b, driver.PW), StatusQueued)
	// Session 2 closes: its held lock (with its conversion) is released,
	// its request cancelled; nothing is granted since session 1 still
	// holds PR on x and EX on y.
	r := h.close(2)
	wantEvents(t, r, "Released#2", "Cancelled#5", "SessionClosed s2")
	for _, e := range r.Events[:2] {
		if e.Reason != ReasonSessionClosed {
			t.Fatalf("reason %v", e.Reason)
		}
	}
	wantEvents(t, h.close(1), "Released#1", "Released#4", "SessionClosed s1", "Granted#3 EX")
	if st := h.t.Stats(); st.Sessions != 1 || st.Resources != 1 || st.Locks != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestExpireSessions: every lock of every expired session goes before
// anything is granted, and the events say why.
func TestExpireSessions(t *testing.T) {
	h := newTest(t, 4, Limits{})
	h.grantedLock(1, "x", driver.EX) // 1
	h.grantedLock(2, "y", driver.EX) // 2
	h.queuedLock(3, "x", driver.EX)  // 3
	h.queuedLock(4, "y", driver.EX)  // 4
	h.queuedLock(2, "x", driver.EX)  // 5, cancelled with session 2
	r := h.expire(2, 1, 2)
	wantEvents(t, r, "Released#1", "SessionExpired s1", "Released#2", "Cancelled#5", "SessionExpired s2",
		"Granted#3 EX", "Granted#4 EX")
	if r.Events[0].Reason != ReasonSessionExpired || r.Events[3].Reason != ReasonSessionExpired {
		t.Fatalf("reasons: %v", r.Events)
	}
	if _, ok := h.t.Session(1); ok {
		t.Fatal("expired session still open")
	}
}

func TestOwnerChecks(t *testing.T) {
	h := newTest(t, 2, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	q := h.queuedLock(2, "x", driver.EX)
	for _, r := range []res{
		h.release(2, a),
		h.cv(2, a, driver.EX),
		h.cancel(1, q),
	} {
		wantErr(t, r, ErrNotOwner)
	}
	wantErr(t, h.release(1, 99), ErrUnknownLock)
	wantErr(t, h.release(9, a), ErrUnknownSession)
	wantErr(t, h.cv(2, q, driver.PR), ErrNotGranted)
	wantErr(t, h.cv(1, a, 0), ErrInvalidMode)
	wantErr(t, h.cv(1, a, 7), ErrInvalidMode)
	wantErr(t, h.convert(ConvertRequest{Session: 1, Lock: a, Mode: driver.EX, Flags: 0x80}), ErrInvalidArgument)
	wantErr(t, h.lock(LockRequest{Session: 1, Resource: "x", Mode: driver.EX, Flags: QueueConvert}), ErrInvalidArgument)
	wantErr(t, h.lk(1, "", driver.EX), ErrInvalidArgument)
	wantErr(t, h.lk(1, "x", 0), ErrInvalidMode)
	h.release(2, q)
	b := h.grantedLock(2, "x", driver.PR)
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued)
	wantErr(t, h.cv(1, a, driver.PW), ErrConversionPending)
	// The error says which lock and which session.
	if err := h.release(2, a).err; err == nil || err.Error() != "locktable: lock belongs to another session: lock 1 is not held by session 2" {
		t.Fatalf("message: %v", err)
	}
	_ = b
}

func TestLimits(t *testing.T) {
	if got := New(Limits{}).Limits(); got != (Limits{
		MaxNameLen: 256, MaxLocksPerSession: 10_000, MaxWaitersPerResource: 10_000,
		MaxResources: 1_000_000, MaxSessions: 100_000, MaxDeadlockSearch: 100_000,
		MaxLocksPerResource: 10_000, MaxLocks: 1_000_000,
	}) {
		t.Fatalf("defaults: %+v", got)
	}
	check := func(r res, want error) {
		t.Helper()
		wantErr(t, r, want)
		if !errors.Is(r.err, ErrLimit) {
			t.Fatalf("%v does not match ErrLimit", r.err)
		}
	}

	h := newTest(t, 2, Limits{MaxNameLen: 4})
	h.grantedLock(1, "abcd", driver.EX)
	check(h.lk(1, "abcde", driver.EX), ErrNameTooLong)
	check(res{err: h.t.OpenSession(Stamp{}, 3, "label")}, ErrNameTooLong)

	h = newTest(t, 2, Limits{MaxLocksPerSession: 2})
	h.grantedLock(1, "a", driver.EX)
	wantStatus(t, h.lock(LockRequest{Session: 1, Owner: 1, Resource: "a", Mode: driver.EX}), StatusQueued) // queued requests count
	check(h.lk(1, "b", driver.EX), ErrTooManyLocks)
	h.grantedLock(2, "c", driver.EX) // per session

	h = newTest(t, 4, Limits{MaxWaitersPerResource: 2})
	a := h.grantedLock(1, "x", driver.PR)
	h.grantedLock(2, "x", driver.PR)
	h.queuedLock(3, "x", driver.EX)
	wantStatus(t, h.cv(1, a, driver.EX), StatusQueued) // conversions count as waiters
	check(h.lk(4, "x", driver.EX), ErrTooManyWaiters)
	h.grantedLock(4, "y", driver.EX)

	h = newTest(t, 1, Limits{MaxResources: 2})
	h.grantedLock(1, "a", driver.EX)
	id := h.grantedLock(1, "b", driver.EX)
	check(h.lk(1, "c", driver.EX), ErrTooManyResources)
	check(h.acquire(SemaphoreRequest{Session: 1, Resource: "c", Capacity: 1, Permits: 1}), ErrTooManyResources)
	h.grantedLock(1, "a", driver.NL) // an existing resource is fine
	h.release(1, id)                 // b is deleted, which makes room
	h.grantedLock(1, "c", driver.EX)

	// Locks per resource: granted and queued count, whatever the mode;
	// conversions add none; other resources are not affected.
	h = newTest(t, 4, Limits{MaxLocksPerResource: 3})
	a = h.grantedLock(1, "x", driver.NL)
	h.grantedLock(2, "x", driver.PR)
	h.queuedLock(3, "x", driver.EX)
	check(h.lk(4, "x", driver.NL), ErrTooManyHolders)
	check(h.lk(1, "x", driver.NL), ErrTooManyHolders)
	if err := h.lk(4, "x", driver.NL).err; err == nil || !strings.Contains(err.Error(), `"x" has 3 locks, the limit is 3`) {
		t.Fatalf("message: %v", err)
	}
	wantStatus(t, h.cv(1, a, driver.PR), StatusGranted) // a conversion at the bound
	h.grantedLock(4, "y", driver.NL)
	h.grantedLock(4, "y", driver.NL)
	h.grantedLock(4, "y", driver.NL)
	for range 3 {
		wantStatus(t, h.acquire(SemaphoreRequest{Session: 4, Resource: "s", Capacity: 9, Permits: 1}), StatusGranted)
	}
	check(h.acquire(SemaphoreRequest{Session: 3, Resource: "s", Capacity: 9, Permits: 1}), ErrTooManyHolders)
	h.release(1, a) // makes room
	h.queuedLock(4, "x", driver.NL)

	// Locks of the whole table, across sessions and resources.
	h = newTest(t, 3, Limits{MaxLocks: 3})
	a = h.grantedLock(1, "a", driver.NL)
	h.grantedLock(2, "b", driver.EX)
	h.queuedLock(3, "b", driver.EX)
	check(h.lk(3, "c", driver.NL), ErrTooManyLocks)
	check(h.acquire(SemaphoreRequest{Session: 3, Resource: "s", Capacity: 1, Permits: 1}), ErrTooManyLocks)
	if err := h.lk(3, "c", driver.NL).err; err == nil || !strings.Contains(err.Error(), "the table has 3 locks, the limit is 3") {
		t.Fatalf("message: %v", err)
	}
	h.release(1, a)
	h.grantedLock(3, "c", driver.NL)

	h = newTest(t, 2, Limits{MaxSessions: 2})
	check(res{err: h.open(3)}, ErrTooManySessions)
	h.close(2)
	if err := h.open(3); err != nil {
		t.Fatal(err)
	}
}

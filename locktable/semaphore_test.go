package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestSemaphore(t *testing.T) {
	h := newTest(t, 4, Limits{})
	sem := func(s SessionID, n uint32) res {
		return h.acquire(SemaphoreRequest{Session: s, Resource: "slots", Capacity: 3, Permits: n})
	}
	a := wantStatus(t, sem(1, 2), StatusGranted)
	wantStatus(t, sem(2, 2), StatusQueued)
	// One permit is free, but a request is queued ahead: no barging.
	wantStatus(t, sem(3, 1), StatusQueued)
	if ri, _ := h.t.Resource("slots"); ri.Kind != KindSemaphore || ri.Capacity != 3 || ri.Used != 2 || len(ri.Waiting) != 2 {
		t.Fatalf("resource: %+v", ri)
	}
	// Releasing A's two permits grants B (2) and C (1) at once.
	wantEvents(t, h.release(1, a), "Released#1", "Granted#2 2p", "Granted#3 1p")
	// Permits die with their session.
	d := wantStatus(t, sem(4, 3), StatusQueued)
	wantEvents(t, h.close(2), "Released#2", "SessionClosed s2")
	wantEvents(t, h.expire(3), "Released#3", "SessionExpired s3", "Granted#4 3p")
	wantEvents(t, h.release(4, d), "Released#4")
	if _, ok := h.t.Resource("slots"); ok {
		t.Fatal("empty semaphore not deleted")
	}
}

func TestSemaphoreErrors(t *testing.T) {
	h := newTest(t, 2, Limits{})
	wantStatus(t, h.acquire(SemaphoreRequest{Session: 1, Resource: "s", Capacity: 2, Permits: 1}), StatusGranted)
	l := h.grantedLock(1, "x", driver.PR)
	for _, c := range []struct {
		req  SemaphoreRequest
		want error
	}{
		{SemaphoreRequest{Session: 2, Resource: "s", Capacity: 3, Permits: 1}, ErrCapacityMismatch},
		{SemaphoreRequest{Session: 2, Resource: "x", Capacity: 2, Permits: 1}, ErrKindMismatch},
		{SemaphoreRequest{Session: 2, Resource: "s", Capacity: 2, Permits: 0}, ErrInvalidArgument},
		{SemaphoreRequest{Session: 2, Resource: "s", Capacity: 2, Permits: 3}, ErrInvalidArgument},
		{SemaphoreRequest{Session: 2, Resource: "n", Capacity: 0, Permits: 0}, ErrInvalidArgument},
		{SemaphoreRequest{Session: 2, Resource: "s", Capacity: 2, Permits: 2, Flags: NoQueue}, ErrWouldBlock},
		{SemaphoreRequest{Session: 2, Resource: "s", Capacity: 2, Permits: 1, Flags: QueueConvert}, ErrInvalidArgument},
	} {
		wantErr(t, h.acquire(c.req), c.want)
	}
	wantErr(t, h.lk(2, "s", driver.NL), ErrKindMismatch)
	wantErr(t, h.cv(1, 1, driver.PR), ErrKindMismatch)
	_ = l
}

func TestSemaphoreNotices(t *testing.T) {
	h := newTest(t, 3, Limits{})
	sem := func(s SessionID, n uint32) res {
		return h.acquire(SemaphoreRequest{Session: s, Resource: "s", Capacity: 2, Permits: n})
	}
	a := wantStatus(t, sem(1, 2), StatusGranted)
	wantEvents(t, sem(2, 1), "Blocking#1 1p")
	wantEvents(t, sem(3, 2)) // already told
	// B gets its permit; C still waits, and B is told.
	wantEvents(t, h.release(1, a), "Released#1", "Granted#2 1p", "Blocking#2 2p")
}

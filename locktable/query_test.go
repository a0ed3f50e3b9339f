package locktable

import (
	"reflect"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestQueries(t *testing.T) {
	h := newTest(t, 3, Limits{})
	h.now = 10
	a := h.grantedLock(1, "x", driver.PR)
	h.now = 20
	b := h.grantedLock(2, "x", driver.PR)
	h.now = 30
	c := wantStatus(t, h.lock(LockRequest{Session: 3, Owner: 9, Resource: "x", Mode: driver.EX, Deadline: 99}), StatusQueued)
	h.now = 40
	wantStatus(t, h.cv(1, a, driver.PW), StatusQueued)
	h.grantedLock(3, "w", driver.NL)

	ri, ok := h.t.Resource("x")
	if !ok {
		t.Fatal("no resource")
	}
	ta, _ := h.t.Describe(a)
	tbk, _ := h.t.Describe(b)
	want := ResourceInfo{
		Name: "x", Kind: KindLock,
		Holders: []LockInfo{
			{ID: a, Session: 1, Resource: "x", Kind: KindLock, State: LockConverting, Mode: driver.PR, Requested: driver.PW, Token: ta.Token, GrantedAt: 10, QueuedAt: 40},
			{ID: b, Session: 2, Resource: "x", Kind: KindLock, State: LockGranted, Mode: driver.PR, Token: tbk.Token, GrantedAt: 20},
		},
		Converting: []LockInfo{
			{ID: a, Session: 1, Resource: "x", Kind: KindLock, State: LockConverting, Mode: driver.PR, Requested: driver.PW, Token: ta.Token, GrantedAt: 10, QueuedAt: 40},
		},
		Waiting: []LockInfo{
			{ID: c, Session: 3, Owner: 9, Resource: "x", Kind: KindLock, State: LockWaiting, Requested: driver.EX, QueuedAt: 30, Deadline: 99},
		},
		HoldersTotal: 2, ConvertingTotal: 1, WaitingTotal: 1,
	}
	if !reflect.DeepEqual(ri, want) {
		t.Fatalf("resource\n got  %+v\n want %+v", ri, want)
	}
	if _, ok := h.t.Resource("nope"); ok {
		t.Fatal("phantom resource")
	}
	if got := h.t.Resources("", 0); len(got) != 2 || got[0].Name != "w" || got[1].Name != "x" {
		t.Fatalf("resources %+v", got)
	}
	if got := h.t.Resources("w", 1); len(got) != 1 || got[0].Name != "x" {
		t.Fatalf("resources page %+v", got)
	}
	ss := h.t.Sessions(1, 1)
	if len(ss) != 1 || ss[0].ID != 2 || len(ss[0].Locks) != 1 || ss[0].Locks[0].ID != b {
		t.Fatalf("sessions page %+v", ss)
	}
	s3, _ := h.t.Session(3)
	if len(s3.Locks) != 2 || s3.Locks[0].ID != c {
		t.Fatalf("session 3 %+v", s3)
	}
	if st := h.t.Stats(); st != (Stats{Sessions: 3, Resources: 2, Locks: 4, Pending: 2, LastToken: h.t.LastToken(), Now: 40}) {
		t.Fatalf("stats %+v", st)
	}
	if s := (Event{Kind: EventGranted, Lock: 1, Session: 2, Resource: "x", Mode: driver.EX, Token: 5, Conversion: true}).String(); s != `Granted lock=1 session=2 owner=0 resource="x" mode=EX token=5 conversion` {
		t.Fatalf("event string %q", s)
	}
}

// TestNoAllocations: steady-state grant and release allocate nothing.
func TestNoAllocations(t *testing.T) {
	tb := New(Limits{})
	tb.OpenSession(Stamp{}, 1, "")
	tb.OpenSession(Stamp{}, 2, "")
	tb.Lock(Stamp{}, LockRequest{Session: 2, Resource: "held", Mode: driver.PR})
	var idx uint64
	allocs := testing.AllocsPerRun(1000, func() {
		idx++
		r, err := tb.Lock(Stamp{Index: idx}, LockRequest{Session: 1, Resource: "held", Mode: driver.PR})
		if err != nil {
			t.Fatal(err)
		}
		tb.Release(Stamp{Index: idx}, 1, r.Lock)
		r, _ = tb.Lock(Stamp{Index: idx}, LockRequest{Session: 1, Resource: "fresh", Mode: driver.EX})
		tb.Release(Stamp{Index: idx}, 1, r.Lock)
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per grant+release", allocs)
	}
}

package locktable

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// richTable builds a table using every feature.
func richTable(t *testing.T) *harness {
	h := newHarness(t, Limits{})
	h.now = 1_700_000_000_000_000_000
	for s := SessionID(1); s <= 4; s++ {
		if err := h.do(false, func(st Stamp) (Result, error) {
			return Result{}, h.t.OpenSession(st, s*10, "client-"+string(rune('a'+s)))
		}).err; err != nil {
			t.Fatal(err)
		}
	}
	a := h.grantedLock(10, "orders/1", driver.PR)
	h.grantedLock(20, "orders/1", driver.PR)
	h.queuedLock(30, "orders/1", driver.EX)
	wantStatus(t, h.convert(ConvertRequest{Session: 10, Lock: a, Mode: driver.EX, Deadline: h.now + 5e9}), StatusQueued)
	h.lock(LockRequest{Session: 40, Owner: 7, Resource: "orders/1", Mode: driver.CR, Deadline: h.now + 1e9})
	h.grantedLock(40, "orders/2", driver.EX)
	h.acquire(SemaphoreRequest{Session: 10, Resource: "pool", Capacity: 5, Permits: 4})
	h.acquire(SemaphoreRequest{Session: 20, Owner: 1, Resource: "pool", Capacity: 5, Permits: 3, Deadline: h.now + 2e9})
	return h
}

func TestSnapshotRoundTrip(t *testing.T) {
	h := richTable(t)
	snap := h.t.Snapshot()
	n := New(Limits{})
	if err := n.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if again := n.Snapshot(); !bytes.Equal(again, snap) {
		t.Fatal("Snapshot → Restore → Snapshot changed the bytes")
	}
	if err := checkInvariants(n, true); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.t.Resources("", 0), n.Resources("", 0)) ||
		!reflect.DeepEqual(h.t.Sessions(0, 0), n.Sessions(0, 0)) ||
		h.t.Stats() != n.Stats() {
		t.Fatal("restored table lists differently")
	}
	d1, ok1 := h.t.NextDeadline()
	d2, ok2 := n.NextDeadline()
	if d1 != d2 || ok1 != ok2 {
		t.Fatal("deadlines differ")
	}
	// Both go on identically.
	st := Stamp{Index: 99, Now: h.now + 3e9}
	r1 := h.t.Advance(st)
	e1 := append([]Event(nil), r1.Events...)
	r2 := n.Advance(st)
	if !reflect.DeepEqual(e1, r2.Events) || len(e1) == 0 {
		t.Fatalf("events differ after restore:\n%v\n%v", e1, r2.Events)
	}
	if !bytes.Equal(h.t.Snapshot(), n.Snapshot()) {
		t.Fatal("snapshots differ after the same operation")
	}
}

func TestRestoreMalformed(t *testing.T) {
	h := richTable(t)
	snap := h.t.Snapshot()
	target := New(Limits{})
	target.OpenSession(Stamp{}, 5, "keep")
	keep := target.Snapshot()
	bad := func(b []byte) {
		t.Helper()
		err := target.Restore(b)
		if !errors.Is(err, ErrMalformedSnapshot) {
			t.Fatalf("Restore(%q) = %v", b, err)
		}
		if !bytes.Equal(target.Snapshot(), keep) {
			t.Fatal("failed Restore changed the table")
		}
	}
	for i := range len(snap) {
		bad(snap[:i]) // every truncation
	}
	bad(append(bytes.Clone(snap), 0)) // trailing byte
	wrong := bytes.Clone(snap)
	wrong[0] = 'X'
	bad(wrong)
	wrong = bytes.Clone(snap)
	wrong[4] = 2 // version
	bad(wrong)
	// Flipping any single byte gives an error or a consistent table.
	for i := range len(snap) {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(snap)
			b[i] ^= x
			n := New(Limits{})
			if err := n.Restore(b); err == nil {
				if err := checkInvariants(n, false); err != nil {
					t.Fatalf("byte %d ^ %#x: restored an inconsistent table: %v", i, x, err)
				}
			}
		}
	}
}

// TestSnapshotGolden pins the format: a change must bump the version.
func TestSnapshotGolden(t *testing.T) {
	tb := New(Limits{})
	tb.OpenSession(Stamp{Now: 1}, 1, "c")
	tb.Lock(Stamp{Index: 2, Now: 2}, LockRequest{Session: 1, Owner: 3, Resource: "r", Mode: driver.EX})
	tb.Lock(Stamp{Index: 3, Now: 3}, LockRequest{Session: 1, Owner: 4, Resource: "r", Mode: driver.PR, Deadline: 9})
	want := []byte("DLMT\x01\x06\x02\x03" + // now=3 last token=2 next id=3
		"\x01\x01\x02\x01c" + // session 1 opened at 1, label "c"
		"\x01\x01r\x01\x00" + // resource "r", lock, capacity 0
		"\x01\x01\x01\x03\x06\x00\x02\x04\x10" + // granted: lock 1 s1 o3 EX 0 permits token 2 at 2, told about PR
		"\x00" + // no conversion
		"\x01\x02\x01\x04\x04\x00\x06\x12") // waiting: lock 2 s1 o4 PR 0 permits queued 3 deadline 9
	if got := tb.Snapshot(); !bytes.Equal(got, want) {
		t.Fatalf("snapshot\n got  %q\n want %q", got, want)
	}
}

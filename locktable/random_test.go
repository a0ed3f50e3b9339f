package locktable

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// The random driver runs operations chosen by a byte source (fuzz input,
// or math/rand with a fixed seed) over a small universe of sessions,
// owners and resources, with small limits so that every limit is hit. The
// harness checks every step; a shadow table replays every operation and
// must return identical results and events, and it is restored from a
// snapshot of the main table now and then (Snapshot → Restore → Snapshot
// must give the same bytes, and the restored table must go on behaving
// identically).

type byteSource interface{ next() (byte, bool) }

type dataSource struct{ b []byte }

func (d *dataSource) next() (byte, bool) {
	if len(d.b) == 0 {
		return 0, false
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v, true
}

type randSource struct{ r *rand.Rand }

func (r randSource) next() (byte, bool) { return byte(r.r.Intn(256)), true }

var driverLimits = Limits{
	MaxNameLen:            8,
	MaxLocksPerSession:    6,
	MaxWaitersPerResource: 4,
	MaxResources:          3,
	MaxSessions:           4,
	MaxLocksPerResource:   7,
	MaxLocks:              15,
}

type randomDriver struct {
	tb     testing.TB
	lim    Limits
	h      *harness
	shadow *Table
	src    byteSource
	single bool // at most one pending request per owner
	owners int  // owners per session
	calm   bool // end sessions less often
	ids    []LockID
	steps  int
}

func newDriver(tb testing.TB, src byteSource, single bool) *randomDriver {
	return newDriverLimits(tb, src, single, driverLimits)
}

func newDriverLimits(tb testing.TB, src byteSource, single bool, lim Limits) *randomDriver {
	h := newHarness(tb, lim)
	h.acyclic = single
	return &randomDriver{tb: tb, lim: lim, h: h, shadow: New(lim), src: src, single: single, owners: 2}
}

func (d *randomDriver) byte() byte {
	b, _ := d.src.next()
	return b
}

// run applies op to the main table through the harness and to the shadow
// table, and compares the outcomes.
func (d *randomDriver) run(conv bool, op func(*Table, Stamp) (Result, error)) res {
	d.tb.Helper()
	var st Stamp
	r := d.h.do(conv, func(s Stamp) (Result, error) {
		st = s
		return op(d.h.t, s)
	})
	sr, serr := op(d.shadow, st)
	if fmt.Sprint(r.err) != fmt.Sprint(serr) || r.Lock != sr.Lock || r.Status != sr.Status ||
		r.Token != sr.Token || !slices.Equal(r.Events, sr.Events) {
		d.tb.Fatalf("shadow diverged:\nmain   %v %v %v\nshadow %v %v %v", r.err, r.Status, r.Events, serr, sr.Status, sr.Events)
	}
	if r.err == nil && r.Lock != 0 {
		d.ids = append(d.ids, r.Lock)
	}
	return r
}

var driverNames = []string{"a", "b", "c", "sem", "toolongname"}

// busy reports whether owner k has a pending request (single mode only).
func (d *randomDriver) busy(k ownerKey) bool { return d.single && d.h.t.pending[k] != nil }

// pickLock returns a live lock id mostly, else a stale or unknown one.
func (d *randomDriver) pickLock(b byte) LockID {
	live := make([]LockID, 0, len(d.h.t.locks))
	for id := range d.h.t.locks {
		live = append(live, id)
	}
	slices.Sort(live)
	switch {
	case len(live) > 0 && b%8 != 0:
		return live[int(b/8)%len(live)]
	case len(d.ids) > 0 && b%16 == 0:
		return d.ids[int(b/16)%len(d.ids)]
	}
	return LockID(b % 16)
}

// sessionOf returns the session of lock id, or a wrong one now and then.
func (d *randomDriver) sessionOf(id LockID, b byte) SessionID {
	if l := d.h.t.locks[id]; l != nil && b%8 != 0 {
		return l.sess.id
	}
	return SessionID(1 + b%5)
}

func (d *randomDriver) deadline(b byte) int64 {
	if b&0x20 == 0 {
		return 0
	}
	return d.h.now + int64(b%8) - 1 // sometimes already passed
}

// step runs one operation; it returns false when the source is exhausted.
func (d *randomDriver) step() bool {
	op, ok := d.src.next()
	if !ok {
		return false
	}
	a, b, c := d.byte(), d.byte(), d.byte()
	d.steps++
	sid := SessionID(1 + a%5)
	if open := d.h.t.sortedSessionIDs(0); len(open) > 0 && a%8 != 0 {
		sid = open[int(a/8)%len(open)]
	}
	owner := OwnerID(int(b) % d.owners)
	name := driverNames[b/2%3]
	switch c % 32 {
	case 30:
		name = driverNames[3] // a lock request on the semaphore
	case 31:
		name = driverNames[4] // too long
	}
	var flags Flags
	if b&0x40 != 0 {
		flags |= NoQueue
	}
	if len(d.h.t.sessions) < 2 && a%4 != 0 {
		op = 0 // keep a few sessions open
	}
	if d.calm && (op%32 == 2 || op%32 == 3) && c%8 != 0 {
		op = 4 // a lock request instead of ending a session
	}
	switch op % 32 {
	case 0, 1:
		id := SessionID(1 + a%5)
		d.run(false, func(t *Table, st Stamp) (Result, error) { return Result{}, t.OpenSession(st, id, "x") })
	case 2:
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.CloseSession(st, sid) })
	case 3:
		ids := []SessionID{sid, SessionID(1 + b%5), sid}[:1+c%3]
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.ExpireSessions(st, ids), nil })
	case 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 29, 30, 31:
		if d.busy(ownerKey{sid, owner}) {
			return true
		}
		req := LockRequest{Session: sid, Owner: owner, Resource: name, Mode: driver.Mode(1 + c%6), Flags: flags, Deadline: d.deadline(b)}
		if c%64 == 63 {
			req.Mode = 0
		}
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.Lock(st, req) })
	case 14, 15:
		if d.busy(ownerKey{sid, owner}) {
			return true
		}
		req := SemaphoreRequest{Session: sid, Owner: owner, Resource: "sem", Capacity: 3, Permits: uint32(1 + c%3), Flags: flags, Deadline: d.deadline(b)}
		if c&0x80 != 0 {
			req.Resource = name // kind mismatch on a, b, c
		}
		if a&0x80 != 0 {
			req.Capacity = 2 // capacity mismatch, or too many permits
		}
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.AcquirePermits(st, req) })
	case 16, 17, 18, 19:
		id := d.pickLock(a)
		if l := d.h.t.locks[id]; l != nil && d.busy(l.key()) {
			return true
		}
		if b&0x80 != 0 {
			flags |= QueueConvert
		}
		req := ConvertRequest{Session: d.sessionOf(id, c), Lock: id, Mode: driver.Mode(1 + c%6), Flags: flags, Deadline: d.deadline(b)}
		d.run(true, func(t *Table, st Stamp) (Result, error) { return t.Convert(st, req) })
	case 20, 21, 22, 23:
		id := d.pickLock(a)
		s := d.sessionOf(id, c)
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.Release(st, s, id) })
	case 24:
		id := d.pickLock(a)
		s := d.sessionOf(id, c)
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.Cancel(st, s, id) })
	case 25, 26:
		d.h.now += 1 + int64(a%6)
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.Advance(st), nil })
	case 27:
		d.h.now += int64(a % 3)
	case 28:
		d.checkRestore()
	}
	return true
}

// checkRestore restores the shadow from a snapshot of the main table.
func (d *randomDriver) checkRestore() {
	d.tb.Helper()
	snap := d.h.t.Snapshot()
	if s := d.shadow.Snapshot(); !bytes.Equal(s, snap) {
		d.tb.Fatalf("shadow snapshot differs before restore")
	}
	d.shadow = New(d.lim)
	if err := d.shadow.Restore(snap); err != nil {
		d.tb.Fatalf("restore: %v", err)
	}
	if s := d.shadow.Snapshot(); !bytes.Equal(s, snap) {
		d.tb.Fatalf("Snapshot → Restore → Snapshot changed the bytes")
	}
	if err := checkInvariants(d.shadow, d.single); err != nil {
		d.tb.Fatalf("restored table: %v", err)
	}
}

// drain releases every granted lock over and over, advancing time past
// every deadline, until the table is empty: every queued request must be
// granted, time out or be cancelled once holders leave. Then it closes all
// sessions.
func (d *randomDriver) drain() {
	d.tb.Helper()
	d.checkRestore()
	for round := 0; len(d.h.t.locks) > 0; round++ {
		if round > 200 {
			d.tb.Fatalf("table does not drain: %d locks left", len(d.h.t.locks))
		}
		var ids []LockID
		for id, l := range d.h.t.locks {
			if l.granted() {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			d.tb.Fatalf("%d requests queued with nothing granted", len(d.h.t.locks))
		}
		slices.Sort(ids)
		for _, id := range ids {
			if l := d.h.t.locks[id]; l != nil && l.granted() {
				s := l.sess.id
				d.run(false, func(t *Table, st Stamp) (Result, error) { return t.Release(st, s, id) })
			}
		}
	}
	for id := SessionID(1); id <= 5; id++ {
		d.run(false, func(t *Table, st Stamp) (Result, error) { return t.CloseSession(st, id) })
	}
	if st := d.h.t.Stats(); st.Sessions+st.Resources+st.Locks+st.Pending != 0 || len(d.h.t.pending) != 0 || len(d.h.t.deadlines) != 0 {
		d.tb.Fatalf("table not empty after draining: %+v", st)
	}
	d.checkRestore()
}

func TestRandomOperations(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	for seed := int64(1); seed <= 8; seed++ {
		for _, single := range []bool{true, false} {
			t.Run(fmt.Sprintf("seed=%d/single=%v", seed, single), func(t *testing.T) {
				d := newDriver(t, randSource{rand.New(rand.NewSource(seed))}, single)
				for range steps {
					d.step()
				}
				d.drain()
			})
		}
	}
}

// TestRandomDeepQueues runs with roomier limits, for longer queues.
func TestRandomDeepQueues(t *testing.T) {
	lim := Limits{MaxNameLen: 8, MaxLocksPerSession: 40, MaxWaitersPerResource: 40, MaxResources: 4, MaxSessions: 5}
	for seed := int64(100); seed < 104; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			d := newDriverLimits(t, randSource{rand.New(rand.NewSource(seed))}, seed%2 == 0, lim)
			d.owners, d.calm = 8, true
			for range 3000 {
				d.step()
			}
			d.drain()
		})
	}
}

// TestReplayIdentical replays one random operation sequence on two fresh
// tables and compares their snapshots.
func TestReplayIdentical(t *testing.T) {
	snap := func() []byte {
		d := newDriver(t, randSource{rand.New(rand.NewSource(42))}, false)
		for range 2000 {
			d.step()
		}
		return d.h.t.Snapshot()
	}
	if a, b := snap(), snap(); !bytes.Equal(a, b) {
		t.Fatal("same operations gave different snapshots")
	}
}

func FuzzTable(f *testing.F) {
	for seed := int64(0); seed < 8; seed++ {
		b := make([]byte, 400)
		rand.New(rand.NewSource(seed)).Read(b)
		f.Add(b)
	}
	f.Add([]byte{0, 1, 0, 0, 3, 1, 0, 5, 3, 2, 0, 5, 8, 4, 0, 5, 13, 9, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 3000 {
			data = data[:3000]
		}
		single := len(data) > 0 && data[0]&1 == 1
		d := newDriver(t, &dataSource{data}, single)
		for d.step() {
		}
		d.drain()
	})
}

func FuzzRestore(f *testing.F) {
	d := newDriver(f, randSource{rand.New(rand.NewSource(7))}, false)
	for i := range 600 {
		d.step()
		if i%100 == 0 {
			f.Add(d.h.t.Snapshot())
		}
	}
	f.Add([]byte("DLMT\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		tb := New(driverLimits)
		if err := tb.Restore(data); err != nil {
			if tb.Stats() != (Stats{}) {
				t.Fatal("failed Restore changed the table")
			}
			return
		}
		if err := checkInvariants(tb, false); err != nil {
			t.Fatalf("restored an inconsistent table: %v", err)
		}
		if again := tb.Snapshot(); !bytes.Equal(again, data) {
			t.Fatalf("accepted a non-canonical snapshot")
		}
		// The restored table must keep working.
		st := Stamp{Index: tb.LastToken() + 1, Now: tb.Now() + 1}
		tb.Advance(st)
		for _, s := range tb.Sessions(0, 0) {
			tb.CloseSession(st, s.ID)
		}
		if tb.Stats().Locks != 0 {
			t.Fatal("locks left after closing every session")
		}
		// It grants with a new lock id and a greater token, and its
		// snapshot restores.
		last := tb.LastToken()
		st = Stamp{Index: last + 1, Now: tb.Now() + 1}
		if err := tb.OpenSession(st, 1, "after"); err != nil {
			t.Fatal(err)
		}
		r, err := tb.Lock(st, LockRequest{Session: 1, Resource: "r", Mode: driver.EX})
		if err != nil || r.Status != StatusGranted || r.Token <= last || r.Lock == 0 {
			t.Fatalf("lock after restore: %+v, %v (last token %d)", r, err, last)
		}
		if err := New(driverLimits).Restore(tb.Snapshot()); err != nil {
			t.Fatalf("the restored table's own snapshot: %v", err)
		}
	})
}

package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

const sec = int64(time.Second)

// TestFSMMatchesTable drives the FSM and a bare table with the same
// operations and stamps: the FSM's results and events are the table's.
func TestFSMMatchesTable(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	tab := locktable.New(locktable.Limits{})

	rs := applyEntry(t, f, 5, 1*sec, openCmd("a"), openCmd("b"))
	mustOK(t, rs...)
	a, b := rs[0].Session, rs[1].Session
	if a != 5 || b != 6 {
		t.Fatalf("sessions = %d, %d; want 5, 6 (max(last+1, index))", a, b)
	}
	st := locktable.Stamp{Index: 5, Now: 1 * sec}
	if tab.OpenSession(st, a, "a") != nil || tab.OpenSession(st, b, "b") != nil {
		t.Fatal("mirror open failed")
	}

	check := func(got Result, want locktable.Result, wantErr error) {
		t.Helper()
		if got.Lock != want.Lock || got.Status != want.Status || got.Token != want.Token ||
			fmt.Sprint(got.Err) != fmt.Sprint(wantErr) {
			t.Fatalf("result %+v, want %+v err %v", got, want, wantErr)
		}
		if len(got.Events) != len(want.Events) || (len(want.Events) > 0 && !reflect.DeepEqual(got.Events, want.Events)) {
			t.Fatalf("events %v, want %v", got.Events, want.Events)
		}
	}

	// a: EX granted; b: EX queued behind it.
	got := applyEntry(t, f, 7, 2*sec, lockCmd(a, 0, "r", dlmpb.Mode_MODE_EX))[0]
	want, err := tab.Lock(locktable.Stamp{Index: 7, Now: 2 * sec}, locktable.LockRequest{Session: a, Owner: locktable.OwnerID(a), Resource: "r", Mode: driver.EX})
	check(got, want, err)
	if got.Status != locktable.StatusGranted || got.Token < 7 {
		t.Fatalf("lock = %+v, want granted with token >= 7", got)
	}
	la := got.Lock

	got = applyEntry(t, f, 8, 3*sec, lockCmd(b, 0, "r", dlmpb.Mode_MODE_EX))[0]
	want, err = tab.Lock(locktable.Stamp{Index: 8, Now: 3 * sec}, locktable.LockRequest{Session: b, Owner: locktable.OwnerID(b), Resource: "r", Mode: driver.EX})
	check(got, want, err)
	lb := got.Lock

	// a down-converts to PR: keeps its token, b still waits.
	got = applyEntry(t, f, 9, 4*sec, convertCmd(a, la, dlmpb.Mode_MODE_PR))[0]
	want, err = tab.Convert(locktable.Stamp{Index: 9, Now: 4 * sec}, locktable.ConvertRequest{Session: a, Lock: la, Mode: driver.PR})
	check(got, want, err)

	// b may not release a's lock.
	got = applyEntry(t, f, 10, 5*sec, releaseCmd(b, la))[0]
	want, err = tab.Release(locktable.Stamp{Index: 10, Now: 5 * sec}, b, la)
	check(got, want, err)
	if !errors.Is(got.Err, locktable.ErrNotOwner) || ReasonOf(got.Err) != dlmpb.Reason_REASON_NOT_OWNER {
		t.Fatalf("foreign release: %v", got.Err)
	}

	// a releases: b is granted, with a token >= this entry's index.
	got = applyEntry(t, f, 11, 6*sec, releaseCmd(a, la))[0]
	want, err = tab.Release(locktable.Stamp{Index: 11, Now: 6 * sec}, a, la)
	check(got, want, err)
	var granted *locktable.Event
	for i, e := range got.Events {
		if e.Kind == locktable.EventGranted && e.Lock == lb {
			granted = &got.Events[i]
		}
	}
	if granted == nil || granted.Token < 11 {
		t.Fatalf("events %v: want b's grant with token >= 11", got.Events)
	}

	// b expires: its lock is released, its record dropped.
	got = applyEntry(t, f, 12, 7*sec, expireCmd(b, 999))[0]
	want = tab.ExpireSessions(locktable.Stamp{Index: 12, Now: 7 * sec}, []locktable.SessionID{b, 999})
	check(got, want, nil)
	if last := got.Events[len(got.Events)-1]; last.Kind != locktable.EventSessionExpired || last.Session != b {
		t.Fatalf("last event %v, want b expired", last)
	}
	if ss := f.Sessions(); len(ss) != 1 || ss[0].ID != a || ss[0].TTL != 10*time.Second {
		t.Fatalf("sessions = %v, want only a", ss)
	}
	if !reflect.DeepEqual(snapshotOfTable(f), tab.Snapshot()) {
		t.Fatal("FSM table diverged from the mirror table")
	}
	if f.AppliedIndex() != 12 {
		t.Fatalf("applied = %d", f.AppliedIndex())
	}
}

func snapshotOfTable(f *FSM) (b []byte) {
	f.Read(func(v View) { t := v.Table(); b = t.Snapshot() })
	return b
}

// TestFSMTokens: tokens are at least the entry's index and strictly
// increase inside a batch and across entries, even if an index repeats.
func TestFSMTokens(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	sid := applyEntry(t, f, 1, sec, openCmd("s"))[0].Session
	var last uint64
	for _, index := range []uint64{2, 3, 3, 100, 101} {
		var cmds []*dlmpb.Command
		for i := range 10 {
			cmds = append(cmds, lockCmd(sid, 0, string(rune('a'+i))+string(rune('0'+index%10))+"-"+time.Duration(index).String(), dlmpb.Mode_MODE_PR))
		}
		for _, r := range applyEntry(t, f, index, sec, cmds...) {
			if r.Err != nil || r.Status != locktable.StatusGranted {
				t.Fatalf("index %d: %+v", index, r)
			}
			if r.Token <= last || r.Token < index {
				t.Fatalf("index %d: token %d after %d", index, r.Token, last)
			}
			last = r.Token
		}
	}
}

// TestFSMSemaphoreAndDeadlines covers semaphores, the relative wait and
// Advance.
func TestFSMSemaphoreAndDeadlines(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openCmd("a"), openCmd("b"))
	a, b := rs[0].Session, rs[1].Session
	sem := func(sid locktable.SessionID, permits uint32, wait *int64) *dlmpb.Command {
		return &dlmpb.Command{Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
			Session: uint64(sid), Resource: "pool", Capacity: 3, Permits: permits, WaitNanos: wait}}}
	}
	zero, oneSec := int64(0), sec
	rs = applyEntry(t, f, 2, 2*sec, sem(a, 2, nil), sem(b, 2, &zero), sem(b, 2, &oneSec))
	if rs[0].Status != locktable.StatusGranted || !errors.Is(rs[1].Err, locktable.ErrWouldBlock) || rs[2].Status != locktable.StatusQueued {
		t.Fatalf("semaphore results: %+v", rs)
	}
	f.Read(func(v View) {
		tab := v.Table()
		if d, ok := tab.NextDeadline(); !ok || d != 3*sec {
			t.Errorf("next deadline = %d, %v; want %d", d, ok, 3*sec)
		}
	})
	adv := &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}}
	r := applyEntry(t, f, 3, 3*sec, adv)[0]
	if len(r.Events) != 1 || r.Events[0].Kind != locktable.EventTimedOut || r.Events[0].Lock != rs[2].Lock {
		t.Fatalf("advance events = %v", r.Events)
	}
	// Wrong kind and invalid mode are the table's refusals; a mode and a
	// capacity together, or neither, are invalid.
	both := sem(a, 1, nil)
	both.GetLock().Mode = dlmpb.Mode_MODE_EX
	rs = applyEntry(t, f, 4, 4*sec, lockCmd(a, 0, "pool", dlmpb.Mode_MODE_EX), lockCmd(a, 0, "x", dlmpb.Mode(262)),
		both, lockCmd(a, 0, "x", dlmpb.Mode_MODE_UNSPECIFIED))
	if !errors.Is(rs[0].Err, locktable.ErrKindMismatch) || !errors.Is(rs[1].Err, locktable.ErrInvalidMode) ||
		!errors.Is(rs[2].Err, locktable.ErrInvalidArgument) || !errors.Is(rs[3].Err, locktable.ErrInvalidArgument) {
		t.Fatalf("refusals: %v, %v, %v, %v", rs[0].Err, rs[1].Err, rs[2].Err, rs[3].Err)
	}
}

// TestFSMIdempotency: a repeated request gets the first answer (a refusal
// too); one older than the cache is stale; the cache is bounded.
func TestFSMIdempotency(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	sid := applyEntry(t, f, 1, sec, openCmd("s"))[0].Session
	first := applyEntry(t, f, 2, sec, lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	again := applyEntry(t, f, 3, sec, lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if !again.Duplicate || again.Lock != first.Lock || again.Token != first.Token || again.Status != first.Status || again.Events != nil {
		t.Fatalf("retry = %+v, want the first answer %+v", again, first)
	}
	tryLock := func() *dlmpb.Command {
		return &dlmpb.Command{Seq: 2, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
			Session: uint64(sid), Owner: 7, Resource: "r", Mode: dlmpb.Mode_MODE_EX, NoQueue: true}}}
	}
	refused := applyEntry(t, f, 4, sec, tryLock())[0]
	dup := applyEntry(t, f, 5, sec, tryLock())[0]
	if !errors.Is(refused.Err, locktable.ErrWouldBlock) || !dup.Duplicate || !errors.Is(dup.Err, locktable.ErrWouldBlock) {
		t.Fatalf("refusal %v, retry %+v", refused.Err, dup)
	}
	// Fill the cache past its size: seq 1 is evicted and becomes stale.
	for seq := uint64(3); seq < 3+ReplyCacheSize; seq++ {
		applyEntry(t, f, 5+seq, sec, lockCmd(sid, seq, "other", dlmpb.Mode_MODE_NL))
	}
	stale := applyEntry(t, f, 100, sec, lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if !errors.Is(stale.Err, ErrStaleRequest) {
		t.Fatalf("stale retry: %+v", stale)
	}
	if n := len(f.sessions[sid].replies); n != ReplyCacheSize {
		t.Fatalf("cache holds %d replies", n)
	}
}

// TestFSMMalformed: undecodable entries are errors that change nothing;
// commands without an operation are refused.
func TestFSMMalformed(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	applyEntry(t, f, 1, sec, openCmd("s"))
	before := snapshotBytes(t, f)
	for _, data := range [][]byte{{0xff}, {0x0a, 0x05, 0x01}, {0x0a, 0x02, 0x52, 0x7f}} {
		resp := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: data})
		if err, ok := resp.(error); !ok || !errors.Is(err, ErrMalformedCommand) {
			t.Fatalf("Apply(%x) = %v, want ErrMalformedCommand", data, resp)
		}
	}
	if f.Apply(&raft.Log{Index: 3, Type: raft.LogNoop}) != nil {
		t.Fatal("non-command entries must be ignored")
	}
	rs := applyEntry(t, f, 4, sec, &dlmpb.Command{}, &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{}}})
	if !errors.Is(rs[0].Err, ErrInvalidCommand) || !errors.Is(rs[1].Err, locktable.ErrInvalidArgument) {
		t.Fatalf("results %v, %v", rs[0].Err, rs[1].Err)
	}
	f.applied = 1 // only the index moved
	if after := snapshotBytes(t, f); string(after) != string(before) {
		t.Fatal("malformed entries changed the state")
	}
}

// TestReasonRoundTrip: every reason of the state machine and the lock
// table maps back to an error with that reason. The service's own reasons
// (package server) are not the state machine's: it never stores them.
func TestReasonRoundTrip(t *testing.T) {
	service := map[dlmpb.Reason]bool{dlmpb.Reason_REASON_NOT_LEADER: true, dlmpb.Reason_REASON_STORAGE: true,
		dlmpb.Reason_REASON_PERMISSION_DENIED: true, dlmpb.Reason_REASON_BAD_RESUME_TOKEN: true}
	for code, name := range dlmpb.Reason_name {
		r := dlmpb.Reason(code)
		if r == dlmpb.Reason_REASON_UNSPECIFIED || service[r] {
			continue
		}
		if got := ReasonOf(ErrorOf(r)); got != r {
			t.Errorf("%s: round trip gives %s", name, got)
		}
	}
}

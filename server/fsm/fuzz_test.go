package fsm

// Fuzz targets for what reaches the state machine from the disk or the
// network: Raft log entries (FSM.Apply) and snapshots (FSM.Restore). `go
// test` runs their seed corpora; scripts/fuzz.sh fuzzes each for a while.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// fuzzIndex is the Raft index fuzzed entries are applied at: above every
// index fuzzFSM used.
const fuzzIndex = 100

// fuzzFSM returns an FSM holding one of everything the log can create
// (servertest.Populate), with cached replies.
func fuzzFSM(tb testing.TB) *FSM {
	tb.Helper()
	f := NewFSM(locktable.Limits{})
	var rs []Result
	for i, b := range servertest.Populate() {
		rs = append(rs, applyEntry(tb, f, uint64(i+1), b.GetStampUnixNano(), b.GetCommands()...)...)
	}
	mustOK(tb, rs...)
	rs = rs[3:] // the sessions' results
	granted, queued := locktable.StatusGranted, locktable.StatusQueued
	for i, want := range []struct {
		status locktable.Status
		lock   locktable.LockID
	}{{granted, 1}, {granted, 2}, {queued, 3}, {granted, 4}, {granted, 5}, {queued, 6}, {queued, 1}} {
		if rs[i].Status != want.status || rs[i].Lock != want.lock {
			tb.Fatalf("fuzzFSM: result %d is %+v, want lock %d %v", i, rs[i], want.lock, want.status)
		}
	}
	return f
}

func ptr[T any](v T) *T { return &v }

// fuzzBatches are real entries against fuzzFSM's state: every command, with
// the values that matter (seqs repeated and stale, waits, wrong owners).
func fuzzBatches() []*dlmpb.Batch {
	adv := &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}}
	closeB := &dlmpb.Command{Op: &dlmpb.Command_CloseSession{CloseSession: &dlmpb.CloseSessionCmd{Session: 2}}}
	down := convertCmd(2, 2, dlmpb.Mode_MODE_NL)
	down.Seq = 7
	queued := convertCmd(1, 4, dlmpb.Mode_MODE_PR)
	queued.GetConvert().QueueConvert, queued.GetConvert().NoQueue = true, true
	b := func(stamp int64, cmds ...*dlmpb.Command) *dlmpb.Batch {
		return &dlmpb.Batch{Commands: cmds, StampUnixNano: stamp}
	}
	return []*dlmpb.Batch{
		b(4*sec, openCmd("d")),
		b(4*sec, closeB),
		b(4*sec, expireCmd(1, 3, 999)),
		b(4*sec, lockCmd(1, 0, "new", dlmpb.Mode_MODE_EX)),
		b(4*sec, withWait(lockCmd(2, 4, "r2", dlmpb.Mode_MODE_PW), 0)),
		b(4*sec, withWait(lockCmd(2, 5, "r2", dlmpb.Mode_MODE_CR), sec)),
		b(4*sec, lockCmd(1, 2, "r2", dlmpb.Mode_MODE_EX)), // a retry: the cached answer
		b(4*sec, lockCmd(1, 1, "r1", dlmpb.Mode_MODE_EX)),
		b(4*sec, withMetadata(semCmd(1, 9, "pool", 4, 1), "meta")),
		b(4*sec, semCmd(1, 9, "pool", 5, 1)),
		b(4*sec, lockCmd(2, 6, "pool", dlmpb.Mode_MODE_EX)),
		b(4*sec, down),
		b(4*sec, queued),
		b(4*sec, convertCmd(3, 3, dlmpb.Mode_MODE_NL)),
		b(4*sec, releaseCmd(1, 4), releaseCmd(2, 4), releaseCmd(3, 3)),
		b(4*sec, cancelCmd(1, 8, 1), cancelCmd(3, 3, 6), cancelCmd(1, 9, 4)),
		b(20*sec, adv),
		b(math.MaxInt64, adv, lockCmd(2, 9, "late", dlmpb.Mode_MODE_EX)),
		b(-sec, adv),
		b(4*sec, memberCmd("node-2", "[::1]:7420", ""), memberCmd("", "x", "y")),
		b(4*sec, &dlmpb.Command{}),
		b(4 * sec),
		b(4*sec, openCmd("e"), lockCmd(1, 10, "r3", dlmpb.Mode_MODE_PR), convertCmd(1, 7, dlmpb.Mode_MODE_EX),
			releaseCmd(2, 2), adv, expireCmd(3), closeB),
	}
}

// FuzzFSMApply applies arbitrary log entry data to a busy FSM, twice (the
// second time as a retry). A malformed entry is an ErrMalformedCommand that
// changes nothing; a decoded one gives one result per command, and every
// refused command has a reason code and no events. Either way the state
// stays consistent and the FSM keeps working.
func FuzzFSMApply(f *testing.F) {
	for _, b := range fuzzBatches() {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add([]byte("\x0a\x05\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := fuzzFSM(t)
		checkApply(t, fsm, fuzzIndex, data)
		checkApply(t, fsm, fuzzIndex+1, data)
		checkFSM(t, fsm)
		checkUsable(t, fsm, fuzzIndex+2)
	})
}

// checkApply applies data at index and checks the outcome.
func checkApply(t *testing.T, fsm *FSM, index uint64, data []byte) {
	t.Helper()
	before := snapshotBytes(t, fsm)
	switch r := fsm.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(type) {
	case error:
		if !errors.Is(r, ErrMalformedCommand) {
			t.Fatalf("Apply: %v, want ErrMalformedCommand", r)
		}
		if !bytes.Equal(snapshotBytes(t, fsm), before) {
			t.Fatal("a malformed entry changed the state")
		}
	case []Result:
		var b dlmpb.Batch
		if err := proto.Unmarshal(data, &b); err != nil {
			t.Fatalf("applied an entry that does not decode: %v", err)
		}
		if len(r) != len(b.GetCommands()) {
			t.Fatalf("%d results for %d commands", len(r), len(b.GetCommands()))
		}
		for i, res := range r {
			if res.Index != index {
				t.Fatalf("result %d: index %d, want %d", i, res.Index, index)
			}
			if res.Err == nil {
				continue
			}
			if len(res.Events) > 0 {
				t.Fatalf("result %d: refused (%v) with events %v", i, res.Err, res.Events)
			}
			if ReasonOf(res.Err) == dlmpb.Reason_REASON_UNSPECIFIED {
				t.Fatalf("result %d: refusal %v has no reason code", i, res.Err)
			}
		}
	default:
		t.Fatalf("Apply returned %T", r)
	}
}

// checkFSM checks that the FSM's state is consistent: its own snapshot
// restores (to the same bytes), its session records are the table's
// sessions, and it keeps metadata only of live locks.
func checkFSM(t *testing.T, fsm *FSM) {
	t.Helper()
	snap := snapshotBytes(t, fsm)
	g := NewFSM(fsm.limits)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("the FSM's own snapshot does not restore: %v", err)
	}
	if again := snapshotBytes(t, g); !bytes.Equal(again, snap) {
		t.Fatal("the snapshot of a restored FSM differs from the one restored")
	}
	checkUsage(t, fsm, "quota counts")
	fsm.Read(func(v View) {
		tab := v.Table()
		ss := tab.Sessions(0, 0)
		if len(ss) != len(fsm.sessions) {
			t.Fatalf("%d sessions in the table, %d session records", len(ss), len(fsm.sessions))
		}
		for _, s := range ss {
			if fsm.sessions[s.ID] == nil {
				t.Fatalf("session %d has no record", s.ID)
			}
			if s.ID > fsm.lastSession {
				t.Fatalf("session %d above the last id issued, %d", s.ID, fsm.lastSession)
			}
		}
		for id := range fsm.metadata {
			if _, ok := tab.Describe(id); !ok {
				t.Fatalf("metadata kept for lock %d, which is gone", id)
			}
		}
	})
}

// checkUsable checks that the FSM still serves, with entries from index on:
// a new session gets a new lock with a new token, and closing it frees it.
func checkUsable(t *testing.T, fsm *FSM, index uint64) {
	t.Helper()
	var last uint64
	name := "fuzz/check"
	fsm.Read(func(v View) {
		tab := v.Table()
		last = tab.LastToken()
		for i := 0; ; i++ {
			if _, taken := tab.Resource(name); !taken {
				break
			}
			name = fmt.Sprintf("fuzz/check%d", i)
		}
	})
	open := applyEntry(t, fsm, index, 0, openCmd("check"))[0]
	if open.Err != nil {
		t.Fatalf("cannot open a session: %v", open.Err)
	}
	lock := applyEntry(t, fsm, index+1, 0, &dlmpb.Command{Seq: 1, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
		Session: uint64(open.Session), Resource: name, Mode: dlmpb.Mode_MODE_EX, NoQueue: true}}})[0]
	if lock.Err != nil || lock.Status != locktable.StatusGranted || lock.Token <= last {
		t.Fatalf("a new session's lock on a free resource: %+v (last token %d)", lock, last)
	}
	closed := applyEntry(t, fsm, index+2, 0, &dlmpb.Command{Op: &dlmpb.Command_CloseSession{
		CloseSession: &dlmpb.CloseSessionCmd{Session: uint64(open.Session)}}})[0]
	if closed.Err != nil {
		t.Fatalf("close: %v", closed.Err)
	}
	fsm.Read(func(v View) {
		tab := v.Table()
		if _, ok := tab.Resource(name); ok {
			t.Fatal("the lock outlived its closed session")
		}
	})
}

// FuzzFSMRestore restores arbitrary snapshot data over a busy FSM. A
// malformed snapshot is an ErrMalformedSnapshot that leaves the FSM as it
// was, and working. A restored one is consistent, keeps working with the
// entries that follow it, and ending every session leaves nothing behind.
func FuzzFSMRestore(f *testing.F) {
	f.Add(snapshotBytes(f, fuzzFSM(f)))
	f.Add(snapshotBytes(f, busyFSM(f)))
	f.Add(snapshotBytes(f, NewFSM(locktable.Limits{})))
	after := fuzzFSM(f)
	for i, b := range fuzzBatches() {
		data, err := proto.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		after.Apply(&raft.Log{Index: fuzzIndex + uint64(i), Type: raft.LogCommand, Data: data})
	}
	f.Add(snapshotBytes(f, after))
	// Counters at their end: the next session id or token would wrap.
	for _, c := range []struct {
		lastSession uint64
		table       []byte
	}{{math.MaxUint64, locktable.New(locktable.Limits{}).Snapshot()}, {0, tableAtEnd()}} {
		data, err := proto.Marshal(&dlmpb.FSMSnapshot{Version: snapshotVersion, Table: c.table, LastSession: c.lastSession})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte("\x08\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := fuzzFSM(t)
		before := snapshotBytes(t, fsm)
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			if !errors.Is(err, ErrMalformedSnapshot) {
				t.Fatalf("Restore: %v, want ErrMalformedSnapshot", err)
			}
			if !bytes.Equal(snapshotBytes(t, fsm), before) {
				t.Fatal("a failed Restore changed the state")
			}
			checkUsable(t, fsm, fuzzIndex)
			return
		}
		checkFSM(t, fsm)
		// Entries after a snapshot have indexes above every id and token
		// it holds.
		var top uint64
		fsm.Read(func(v View) { tab := v.Table(); top = max(uint64(fsm.lastSession), tab.LastToken()) })
		index := top + 1
		checkUsable(t, fsm, index)
		ids := make([]locktable.SessionID, 0, len(fsm.sessions))
		for id := range fsm.sessions {
			ids = append(ids, id)
		}
		applyEntry(t, fsm, index+3, 0, expireCmd(ids...))
		if st := statsOf(fsm); st.Sessions != 0 || st.Locks != 0 || st.Resources != 0 || st.Pending != 0 ||
			len(fsm.sessions) != 0 || len(fsm.metadata) != 0 {
			t.Fatalf("after every session expired: %+v, %d records, %d metadata", st, len(fsm.sessions), len(fsm.metadata))
		}
		checkFSM(t, fsm)
	})
}

// tableAtEnd returns the snapshot of an empty table whose last token and
// next lock id are the largest uint64.
func tableAtEnd() []byte {
	b := []byte("DLMT\x01\x00")
	b = protowire.AppendVarint(b, math.MaxUint64)
	b = protowire.AppendVarint(b, math.MaxUint64)
	return append(b, 0, 0) // no sessions, no resources
}

func statsOf(fsm *FSM) (st locktable.Stats) {
	fsm.Read(func(v View) { tab := v.Table(); st = tab.Stats() })
	return st
}

package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// busyFSM returns an FSM with sessions, granted and queued locks, a
// semaphore and cached replies.
func busyFSM(t testing.TB) *FSM {
	t.Helper()
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openCmd("a"), openCmd("b"), openCmd("c"))
	a, b, c := rs[0].Session, rs[1].Session, rs[2].Session
	mustOK(t, applyEntry(t, f, 2, 2*sec,
		lockCmd(a, 1, "r1", dlmpb.Mode_MODE_PR),
		lockCmd(b, 1, "r1", dlmpb.Mode_MODE_PR),
		lockCmd(c, 1, "r1", dlmpb.Mode_MODE_EX),
		lockCmd(a, 2, "r2", dlmpb.Mode_MODE_EX),
		&dlmpb.Command{Seq: 2, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{Session: uint64(b), Resource: "sem", Capacity: 4, Permits: 3, Metadata: []byte("job 7")}}},
		&dlmpb.Command{Seq: 3, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{Session: uint64(c), Resource: "r3", Mode: dlmpb.Mode_MODE_EX, Metadata: []byte("gone with c")}}},
	)...)
	applyEntry(t, f, 3, 3*sec, expireCmd(c))
	return f
}

// Metadata lives as long as its lock: kept through a snapshot, dropped with
// the lock (here, c's lock went with its session).
func TestMetadataFollowsTheLock(t *testing.T) {
	f := busyFSM(t)
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*FSM{f, g} {
		if len(h.metadata) != 1 {
			t.Fatalf("%d metadata entries, want the semaphore's only", len(h.metadata))
		}
		for id, m := range h.metadata {
			if info, ok := h.table.Describe(id); !ok || info.Resource != "sem" || string(m) != "job 7" {
				t.Fatalf("metadata %q on lock %d (%+v)", m, id, info)
			}
			applyEntry(t, h, 20, 5*sec, releaseCmd(info(h, id).Session, id))
		}
		if len(h.metadata) != 0 {
			t.Fatal("metadata kept after the release")
		}
	}
}

func info(f *FSM, id locktable.LockID) locktable.LockInfo {
	li, _ := f.table.Describe(id)
	return li
}

// TestSnapshotRoundTrip: snapshot → restore → snapshot gives the same bytes,
// and both FSMs then apply the same entries identically.
func TestSnapshotRoundTrip(t *testing.T) {
	f := busyFSM(t)
	data := snapshotBytes(t, f)
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, g); !bytes.Equal(again, data) {
		t.Fatal("snapshot of the restored FSM differs")
	}
	if got, want := g.Sessions(), f.Sessions(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("sessions %v, want %v", got, want)
	}
	// The caches survive: a retry is still answered from the cache.
	for _, h := range []*FSM{f, g} {
		r := applyEntry(t, h, 10, 4*sec, lockCmd(f.Sessions()[0].ID, 2, "r2", dlmpb.Mode_MODE_EX),
			openCmd("d"), lockCmd(f.Sessions()[1].ID, 3, "r2", dlmpb.Mode_MODE_EX))
		if !r[0].Duplicate || r[1].Session != 10 || r[2].Status != locktable.StatusQueued {
			t.Fatalf("after restore: %+v", r)
		}
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
		t.Fatal("FSMs diverged after the same entries")
	}
}

// TestSnapshotMalformed: bad snapshots are errors and change nothing.
func TestSnapshotMalformed(t *testing.T) {
	good := snapshotBytes(t, busyFSM(t))
	var s dlmpb.FSMSnapshot
	if err := proto.Unmarshal(good, &s); err != nil {
		t.Fatal(err)
	}
	variant := func(edit func(s *dlmpb.FSMSnapshot)) []byte {
		c := proto.Clone(&s).(*dlmpb.FSMSnapshot)
		edit(c)
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"empty":        nil,
		"garbage":      []byte("not a snapshot"),
		"truncated":    good[:len(good)-3],
		"version":      variant(func(s *dlmpb.FSMSnapshot) { s.Version = 2 }),
		"table":        variant(func(s *dlmpb.FSMSnapshot) { s.Table = s.Table[:len(s.Table)/2] }),
		"no records":   variant(func(s *dlmpb.FSMSnapshot) { s.Sessions = nil }),
		"wrong id":     variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].Id = 4 }),
		"order":        variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0], s.Sessions[1] = s.Sessions[1], s.Sessions[0] }),
		"last session": variant(func(s *dlmpb.FSMSnapshot) { s.LastSession = 1 }),
		"ttl":          variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].TtlNanos = 0 }),
		"silence":      variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].SilentNanos = -1 }),
		"unheard":      variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].SilentNanos, s.Sessions[0].Unheard = 5, true }),
		"reply order":  variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].SeqFloor = 5 }),
		"reason":       variant(func(s *dlmpb.FSMSnapshot) { s.Sessions[0].Replies[0].Reason = 999 }),
		"metadata": variant(func(s *dlmpb.FSMSnapshot) {
			s.Sessions[0].Metadata = []*dlmpb.LockMetadata{{LockId: 999, Data: []byte("x")}}
		}),
	}
	f := busyFSM(t)
	before := snapshotBytes(t, f)
	for name, data := range cases {
		err := f.Restore(io.NopCloser(bytes.NewReader(data)))
		if !errors.Is(err, ErrMalformedSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrMalformedSnapshot", name, err)
		}
	}
	for i := range len(good) {
		if err := f.Restore(io.NopCloser(bytes.NewReader(good[:i]))); err == nil {
			t.Fatalf("truncated to %d bytes: restored", i)
		}
	}
	if !bytes.Equal(snapshotBytes(t, f), before) {
		t.Fatal("a failed Restore changed the state")
	}
}

// A checkpoint records sessions' silences, which a new leader starts from:
// a silence of 0 (or less) clears it, unknown sessions are skipped, and a
// snapshot keeps them.
func TestCheckpointRecordsSilences(t *testing.T) {
	f := busyFSM(t)
	ss := f.Sessions()
	a, b := ss[0].ID, ss[1].ID
	before := time.Now()
	mustOK(t, applyEntry(t, f, 10, 4*sec, checkpointCmd(a, 3*time.Second, b, 1500*time.Millisecond, locktable.SessionID(999), time.Second))...)
	mustOK(t, applyEntry(t, f, 11, 4*sec, checkpointCmd(b, -time.Second))...)
	want := map[locktable.SessionID]time.Duration{a: 3 * time.Second, b: 0}
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	for _, h := range []*FSM{f, g} {
		for _, m := range h.Sessions() {
			if m.Silent != want[m.ID] {
				t.Fatalf("session %d silent %s, want %s", m.ID, m.Silent, want[m.ID])
			}
			// This node's clock when it applied or restored the record.
			if m.Silent > 0 && (m.SilentAt.Before(before) || m.SilentAt.After(after)) {
				t.Fatalf("session %d recorded silent at %v, not between the apply's start %v and the restore %v", m.ID, m.SilentAt, before, after)
			}
		}
	}
	mustOK(t, applyEntry(t, f, 12, 4*sec, checkpointCmd(a, time.Duration(0)))...)
	if m := f.Sessions()[0]; m.Silent != 0 {
		t.Fatalf("session %d silent %s after a checkpoint of 0", m.ID, m.Silent)
	}
}

// A checkpoint with unheard records every session that has no record
// unheard from its apply on (silence 0, counting), and leaves the others;
// a later record never lowers the silence a node counts; a snapshot keeps
// the unheard; a keepalive heard (silence 0) clears it.
func TestCheckpointRecordsUnheard(t *testing.T) {
	f := busyFSM(t)
	ss := f.Sessions()
	a, b := ss[0].ID, ss[1].ID
	c := applyEntry(t, f, 9, 4*sec, openCmd("d"))[0].Session
	mustOK(t, applyEntry(t, f, 10, 4*sec, checkpointCmd(a, 3*time.Second))...)
	aAt := f.Sessions()[0].SilentAt
	unheard := checkpointCmd(c, time.Duration(0))
	unheard.GetCheckpointSessions().Unheard = true
	before := time.Now()
	mustOK(t, applyEntry(t, f, 11, 4*sec, unheard)...)
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*FSM{f, g} {
		got := map[locktable.SessionID]SessionMeta{}
		for _, m := range h.Sessions() {
			got[m.ID] = m
		}
		if m := got[a]; !m.Recorded || m.Silent != 3*time.Second || h == f && !m.SilentAt.Equal(aAt) {
			t.Fatalf("session a, recorded silent before: %+v", m)
		}
		if m := got[b]; !m.Recorded || m.Silent != 0 || m.SilentAt.Before(before) {
			t.Fatalf("session b, not recorded before: %+v, want recorded unheard from %v", m, before)
		}
		// Listed heard in the same entry: the record applies after the
		// unheard.
		if m := got[c]; m.Recorded || m.Silent != 0 || !m.SilentAt.IsZero() {
			t.Fatalf("session c, heard: %+v, want no record", m)
		}
	}

	// A lower record (a leader started again counts less) keeps the
	// longer count; a longer one replaces it.
	mustOK(t, applyEntry(t, f, 12, 4*sec, checkpointCmd(a, time.Second))...)
	if m := f.Sessions()[0]; m.Silent != 3*time.Second || !m.SilentAt.Equal(aAt) {
		t.Fatalf("session a after a lower record: silent %s at %v, want 3s at %v", m.Silent, m.SilentAt, aAt)
	}
	mustOK(t, applyEntry(t, f, 13, 4*sec, checkpointCmd(a, time.Hour))...)
	if m := f.Sessions()[0]; m.Silent != time.Hour || !m.SilentAt.After(aAt) {
		t.Fatalf("session a after a longer record: silent %s at %v", m.Silent, m.SilentAt)
	}
	mustOK(t, applyEntry(t, f, 14, 4*sec, checkpointCmd(b, time.Duration(0)))...)
	if m := f.Sessions()[1]; m.Recorded {
		t.Fatalf("session b heard: %+v, want no record", m)
	}
}

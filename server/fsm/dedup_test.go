package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// openAsCmd opens a session of identity owner with a resume hash.
func openAsCmd(owner string, hash []byte) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: owner, TtlNanos: int64(10 * time.Second), Owner: owner, ResumeHash: hash}}}
}

func seqd(seq uint64, c *dlmpb.Command) *dlmpb.Command {
	c.Seq = seq
	return c
}

// TestFSMDedupBindsContent: a used request id with another request is
// refused with ErrRequestIDReused and changes nothing; the same request is a
// duplicate. Every field that changes a request's effect counts.
func TestFSMDedupBindsContent(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	sid := applyEntry(t, f, 1, sec, openCmd("s"))[0].Session
	first := applyEntry(t, f, 2, sec, lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	mustOK(t, first)

	wait := int64(5)
	others := map[string]*dlmpb.Command{
		"resource": lockCmd(sid, 1, "r2", dlmpb.Mode_MODE_EX),
		"mode":     lockCmd(sid, 1, "r", dlmpb.Mode_MODE_PR),
		"release":  seqd(1, releaseCmd(sid, first.Lock)),
		"cancel":   cancelCmd(sid, 1, first.Lock),
		"convert":  seqd(1, convertCmd(sid, first.Lock, dlmpb.Mode_MODE_NL)),
	}
	for name, mut := range map[string]func(*dlmpb.LockCmd){
		"owner":    func(l *dlmpb.LockCmd) { l.Owner++ },
		"no_queue": func(l *dlmpb.LockCmd) { l.NoQueue = true },
		"wait":     func(l *dlmpb.LockCmd) { l.WaitNanos = &wait },
		"metadata": func(l *dlmpb.LockCmd) { l.Metadata = []byte("m") },
		"capacity": func(l *dlmpb.LockCmd) { l.Capacity, l.Permits, l.Mode = 2, 1, 0 },
	} {
		c := lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX)
		mut(c.GetLock())
		others[name] = c
	}
	before := snapshotBytes(t, f)
	index := uint64(3)
	for name, c := range others {
		r := applyEntry(t, f, index, sec, c)[0]
		index++
		if !errors.Is(r.Err, ErrRequestIDReused) || r.Duplicate || len(r.Events) != 0 {
			t.Fatalf("seq 1 reused with another %s: %+v, want ErrRequestIDReused", name, r)
		}
		if !strings.Contains(r.Err.Error(), "seq 1") {
			t.Fatalf("refusal %q does not name the request id", r.Err)
		}
	}
	f.applied = 2
	if !bytes.Equal(snapshotBytes(t, f), before) {
		t.Fatal("refused reuses changed the state")
	}
	again := applyEntry(t, f, index, sec, lockCmd(sid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if !again.Duplicate || again.Err != nil || again.Lock != first.Lock || again.Token != first.Token {
		t.Fatalf("the same request again: %+v, want the duplicate of %+v", again, first)
	}
	// The digest is a pure function of the content, never 0.
	a, b := requestDigest(lockCmd(sid, 9, "r", dlmpb.Mode_MODE_EX)), requestDigest(lockCmd(sid, 10, "r", dlmpb.Mode_MODE_EX))
	if a != b || a == 0 {
		t.Fatalf("digests %x, %x of the same request under two ids", a, b)
	}
	// The encoding is fixed: a digest kept in a snapshot stays valid in
	// later versions (and hash/fnv agrees with the inline FNV-1a).
	if a != 0x6df0fd9980f37b8b {
		t.Fatalf("digest of a fixed request changed: %#x", a)
	}
	h := fnv.New64a()
	h.Write(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 3), 5), 9))
	if got := requestDigest(seqd(1, releaseCmd(5, 9))); got != h.Sum64() {
		t.Fatalf("digest of release 9 of session 5: %#x, want FNV-1a of kind 3, 5, 9 little-endian: %#x", got, h.Sum64())
	}
}

// TestFSMDedupSeqIncreases: a new seq at or below the highest the session
// used is stale; seq 0 is not deduplicated.
func TestFSMDedupSeqIncreases(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	sid := applyEntry(t, f, 1, sec, openCmd("s"))[0].Session
	mustOK(t, applyEntry(t, f, 2, sec, lockCmd(sid, 10, "a", dlmpb.Mode_MODE_NL))...)
	for i, seq := range []uint64{1, 9} {
		r := applyEntry(t, f, uint64(3+i), sec, lockCmd(sid, seq, "b", dlmpb.Mode_MODE_NL))[0]
		if !errors.Is(r.Err, ErrStaleRequest) || !strings.Contains(r.Err.Error(), fmt.Sprint(seq)) {
			t.Fatalf("seq %d after 10: %v, want ErrStaleRequest naming it", seq, r.Err)
		}
	}
	if dup := applyEntry(t, f, 5, sec, lockCmd(sid, 10, "a", dlmpb.Mode_MODE_NL))[0]; !dup.Duplicate {
		t.Fatalf("seq 10 again: %+v, want a duplicate", dup)
	}
	mustOK(t, applyEntry(t, f, 6, sec, lockCmd(sid, 11, "b", dlmpb.Mode_MODE_NL), lockCmd(sid, 0, "c", dlmpb.Mode_MODE_NL), lockCmd(sid, 0, "d", dlmpb.Mode_MODE_NL))...)
	// The window stays bounded, and the highest seq is kept past it.
	for seq := uint64(12); seq < 12+2*ReplyCacheSize; seq++ {
		mustOK(t, applyEntry(t, f, seq, sec, lockCmd(sid, seq, "n", dlmpb.Mode_MODE_NL))...)
	}
	if n := len(f.sessions[sid].replies); n != ReplyCacheSize {
		t.Fatalf("the cache holds %d replies, want %d", n, ReplyCacheSize)
	}
	if r := applyEntry(t, f, 200, sec, lockCmd(sid, 11+2*ReplyCacheSize-1, "x", dlmpb.Mode_MODE_NL))[0]; !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("a cached seq with another request: %v", r.Err)
	}
}

// TestFSMDedupAnswersCurrentTruth: a replayed lock or conversion reports
// the lock as it is now, or that it is gone; a release is replayed as it was.
func TestFSMDedupAnswersCurrentTruth(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openCmd("a"), openCmd("b"))
	a, b := rs[0].Session, rs[1].Session
	held := applyEntry(t, f, 2, sec, lockCmd(a, 1, "r", dlmpb.Mode_MODE_EX))[0]
	queued := applyEntry(t, f, 3, sec, lockCmd(b, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if queued.Status != locktable.StatusQueued {
		t.Fatalf("b's lock: %+v, want queued", queued)
	}
	if r := applyEntry(t, f, 4, sec, lockCmd(b, 1, "r", dlmpb.Mode_MODE_EX))[0]; !r.Duplicate || r.Status != locktable.StatusQueued || r.Lock != queued.Lock {
		t.Fatalf("replay while queued: %+v", r)
	}
	mustOK(t, applyEntry(t, f, 5, sec, seqd(2, releaseCmd(a, held.Lock)))...) // b is granted
	r := applyEntry(t, f, 6, sec, lockCmd(b, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if !r.Duplicate || r.Status != locktable.StatusGranted || r.Token != 5 || r.Mode != driver.EX {
		t.Fatalf("replay after the grant: %+v, want granted EX with the grant's token 5", r)
	}
	conv := applyEntry(t, f, 7, sec, seqd(2, convertCmd(b, queued.Lock, dlmpb.Mode_MODE_PR)))[0]
	mustOK(t, conv)
	r = applyEntry(t, f, 8, sec, lockCmd(b, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if r.Status != locktable.StatusGranted || r.Mode != driver.PR || r.Token != conv.Token {
		t.Fatalf("replay after a conversion: %+v, want granted PR", r)
	}
	// a's lock is gone (released, then b got the resource).
	r = applyEntry(t, f, 9, sec, lockCmd(a, 1, "r", dlmpb.Mode_MODE_EX))[0]
	if !errors.Is(r.Err, locktable.ErrUnknownLock) || r.Lock != held.Lock || r.Status == locktable.StatusGranted || !strings.Contains(r.Err.Error(), "answered before") {
		t.Fatalf("replay of a released lock: %+v, want ErrUnknownLock for lock %d", r, held.Lock)
	}
	if r := applyEntry(t, f, 10, sec, seqd(2, releaseCmd(a, held.Lock)))[0]; !r.Duplicate || r.Err != nil {
		t.Fatalf("replayed release: %+v, want its first answer", r)
	}
}

// TestFSMForeignIdentityLockLooksMissing: across identities a lock of
// another session is refused exactly as a missing one; within one identity
// (and without authentication) ErrNotOwner stays.
func TestFSMForeignIdentityLockLooksMissing(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openAsCmd("alice", nil), openAsCmd("bob", nil), openAsCmd("alice", nil), openCmd("x"), openCmd("y"))
	alice, bob, alice2, x, y := rs[0].Session, rs[1].Session, rs[2].Session, rs[3].Session, rs[4].Session
	held := applyEntry(t, f, 2, sec, lockCmd(alice, 0, "a/r", dlmpb.Mode_MODE_EX))[0]
	heldX := applyEntry(t, f, 3, sec, lockCmd(x, 0, "x/r", dlmpb.Mode_MODE_EX))[0]
	missing := locktable.LockID(999)
	index := uint64(4)
	apply := func(c *dlmpb.Command) Result {
		index++
		return applyEntry(t, f, index, sec, c)[0]
	}
	for name, mk := range map[string]func(locktable.SessionID, locktable.LockID) *dlmpb.Command{
		"release": releaseCmd,
		"convert": func(s locktable.SessionID, l locktable.LockID) *dlmpb.Command {
			return convertCmd(s, l, dlmpb.Mode_MODE_NL)
		},
		"cancel": func(s locktable.SessionID, l locktable.LockID) *dlmpb.Command { return cancelCmd(s, 0, l) },
	} {
		foreign, absent := apply(mk(bob, held.Lock)), apply(mk(bob, missing))
		norm := func(r Result, id locktable.LockID) string {
			return fmt.Sprintf("%d %v", r.Lock, strings.ReplaceAll(fmt.Sprint(r.Err), fmt.Sprint(id), "<id>"))
		}
		if !errors.Is(foreign.Err, locktable.ErrUnknownLock) || norm(foreign, held.Lock) != norm(absent, missing) {
			t.Fatalf("%s: foreign %q, missing %q: want the same", name, norm(foreign, held.Lock), norm(absent, missing))
		}
		if r := apply(mk(alice2, held.Lock)); !errors.Is(r.Err, locktable.ErrNotOwner) {
			t.Fatalf("%s by the same identity: %v, want ErrNotOwner", name, r.Err)
		}
		if r := apply(mk(y, heldX.Lock)); !errors.Is(r.Err, locktable.ErrNotOwner) {
			t.Fatalf("%s without authentication: %v, want ErrNotOwner", name, r.Err)
		}
	}
}

// TestFSMSnapshotKeepsDedupAndResumeHash: the resume hash, the reply
// digests and the highest seq survive a snapshot; a reply of an older
// snapshot (digest 0) matches any request.
func TestFSMSnapshotKeepsDedupAndResumeHash(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	hash := sha256.Sum256([]byte("the token"))
	sid := applyEntry(t, f, 1, sec, openAsCmd("alice", hash[:]))[0].Session
	for seq := uint64(1); seq <= ReplyCacheSize+3; seq++ {
		mustOK(t, applyEntry(t, f, 1+seq, sec, lockCmd(sid, seq, fmt.Sprint("r", seq), dlmpb.Mode_MODE_NL))...)
	}
	data := snapshotBytes(t, f)
	if bytes.Contains(data, []byte("the token")) || !bytes.Contains(data, hash[:]) {
		t.Fatal("the snapshot must keep the hash, not the token")
	}
	g := NewFSM(locktable.Limits{})
	if err := g.restore(data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, g), data) {
		t.Fatal("snapshot after restore differs")
	}
	if rec := g.sessions[sid]; !bytes.Equal(rec.resumeHash, hash[:]) {
		t.Fatalf("restored resume hash %x", rec.resumeHash)
	}
	top := uint64(ReplyCacheSize + 3)
	if r := applyEntry(t, g, 100, sec, lockCmd(sid, top, "other", dlmpb.Mode_MODE_NL))[0]; !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("after restore, a reused id: %v", r.Err)
	}
	if r := applyEntry(t, g, 101, sec, lockCmd(sid, 2, "r2", dlmpb.Mode_MODE_NL))[0]; !errors.Is(r.Err, ErrStaleRequest) {
		t.Fatalf("after restore, an evicted seq: %v", r.Err)
	}

	// An older snapshot: replies without digests, a session without a hash.
	old := NewFSM(locktable.Limits{})
	osid := applyEntry(t, old, 1, sec, openCmd("old"))[0].Session
	first := applyEntry(t, old, 2, sec, lockCmd(osid, 1, "r", dlmpb.Mode_MODE_EX))[0]
	old.sessions[osid].replies[0].digest = 0
	h := NewFSM(locktable.Limits{})
	if err := h.restore(snapshotBytes(t, old)); err != nil {
		t.Fatal(err)
	}
	if r := applyEntry(t, h, 3, sec, lockCmd(osid, 1, "else", dlmpb.Mode_MODE_EX))[0]; !r.Duplicate || r.Lock != first.Lock {
		t.Fatalf("a digest-0 reply: %+v, want it to match as a duplicate", r)
	}
	if rec := h.sessions[osid]; len(rec.resumeHash) != 0 || rec.resumableWith(nil) || rec.resumableWith([]byte{}) {
		t.Fatal("a session without a hash got one, or can be resumed")
	}
	// A hash of the wrong size is refused.
	if r := applyEntry(t, h, 4, sec, openAsCmd("x", []byte("short")))[0]; !errors.Is(r.Err, locktable.ErrInvalidArgument) || !strings.Contains(r.Err.Error(), "5 bytes") {
		t.Fatalf("open with a 5-byte resume hash: %v", r.Err)
	}
}

// BenchmarkRequestDigest measures the digest every numbered request costs
// the FSM (on every replica).
func BenchmarkRequestDigest(b *testing.B) {
	c := lockCmd(5, 7, "orders/2026/11/25/invoice-000042", dlmpb.Mode_MODE_EX)
	c.GetLock().Metadata = []byte("worker 3 on host build-17")
	for b.Loop() {
		requestDigest(c)
	}
}

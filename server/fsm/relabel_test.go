package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// metadataOf reads the metadata of lock id through a view.
func metadataOf(f *FSM, id locktable.LockID) string {
	var m []byte
	f.Read(func(v View) { m = v.Metadata(id) })
	return string(m)
}

// A relabel sets the metadata of a lock of the session, granted or
// queued, without touching the lock; a snapshot keeps it; an empty one
// clears it. A lock that is gone, or another session's, is refused and
// keeps its metadata.
func TestRelabel(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openCmd("a"), openCmd("b"))
	a, b := rs[0].Session, rs[1].Session
	rs = applyEntry(t, f, 2, 2*sec, withMetadata(lockCmd(a, 1, "r", dlmpb.Mode_MODE_EX), "v1"), lockCmd(b, 1, "r", dlmpb.Mode_MODE_EX))
	mustOK(t, rs...)
	held, queued := rs[0].Lock, rs[1].Lock
	before := info(f, held)

	rs = applyEntry(t, f, 3, 3*sec, relabelCmd(a, 2, held, "v2"), relabelCmd(b, 2, queued, "next"))
	mustOK(t, rs...)
	if rs[0].Lock != held || len(rs[0].Events) != 0 {
		t.Fatalf("relabel result %+v", rs[0])
	}
	if got := metadataOf(f, held); got != "v2" {
		t.Fatalf("metadata %q after the relabel, want v2", got)
	}
	if got := metadataOf(f, queued); got != "next" {
		t.Fatalf("queued lock's metadata %q, want next", got)
	}
	if after := info(f, held); after != before {
		t.Fatalf("the relabel changed the lock: %+v, was %+v", after, before)
	}

	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if got := metadataOf(g, held); got != "v2" {
		t.Fatalf("restored metadata %q, want v2", got)
	}

	// A retry of the same request is answered again without effect; the
	// same seq for another request is refused.
	if r := applyEntry(t, f, 4, 4*sec, relabelCmd(a, 2, held, "v2"))[0]; r.Err != nil || !r.Duplicate {
		t.Fatalf("retried relabel: %+v", r)
	}
	if r := applyEntry(t, f, 5, 4*sec, relabelCmd(a, 2, held, "v3"))[0]; !errors.Is(r.Err, ErrRequestIDReused) {
		t.Fatalf("relabel with a used seq: %v", r.Err)
	}

	// b may not relabel a's lock.
	if r := applyEntry(t, f, 6, 5*sec, relabelCmd(b, 3, held, "stolen"))[0]; !errors.Is(r.Err, locktable.ErrNotOwner) || ReasonOf(r.Err) != dlmpb.Reason_REASON_NOT_OWNER {
		t.Fatalf("foreign relabel: %v", r.Err)
	}
	if got := metadataOf(f, held); got != "v2" {
		t.Fatalf("metadata %q after a refused relabel, want v2", got)
	}

	// Empty clears it; a lock that is gone is unknown.
	mustOK(t, applyEntry(t, f, 7, 6*sec, relabelCmd(a, 3, held, ""))...)
	if _, ok := f.metadata[held]; ok {
		t.Fatal("empty metadata kept")
	}
	mustOK(t, applyEntry(t, f, 8, 7*sec, releaseCmd(a, held))...)
	if r := applyEntry(t, f, 9, 8*sec, relabelCmd(a, 4, held, "late"))[0]; !errors.Is(r.Err, locktable.ErrUnknownLock) {
		t.Fatalf("relabel of a released lock: %v", r.Err)
	}
	if _, ok := f.metadata[held]; ok {
		t.Fatal("a released lock got metadata")
	}
	if r := applyEntry(t, f, 10, 9*sec, relabelCmd(99, 1, queued, "x"))[0]; !errors.Is(r.Err, locktable.ErrUnknownSession) {
		t.Fatalf("relabel from no session: %v", r.Err)
	}
}

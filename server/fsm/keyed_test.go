package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

func keyed(key string, c *dlmpb.Command) *dlmpb.Command {
	c.Seq, c.Key = 0, key
	return c
}

// Keyed requests (the unary API's request ids) are applied once per
// (session, key), in any order, across a snapshot; the same key with
// another request is refused.
func TestFSMKeyedDedup(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	rs := applyEntry(t, f, 1, sec, openCmd("a"), openCmd("b"))
	a, b := rs[0].Session, rs[1].Session
	held := applyEntry(t, f, 2, sec, keyed("k1", lockCmd(a, 0, "r", dlmpb.Mode_MODE_EX)))[0]
	mustOK(t, held)
	waiting := applyEntry(t, f, 3, sec, keyed("k2", lockCmd(b, 0, "r", dlmpb.Mode_MODE_EX)))[0]
	mustOK(t, waiting)
	if waiting.Status != locktable.StatusQueued {
		t.Fatalf("b's request: %+v", waiting)
	}
	// Keys need no order: "k0" after "k2" is new.
	mustOK(t, applyEntry(t, f, 4, sec, keyed("k0", lockCmd(b, 0, "s", dlmpb.Mode_MODE_EX)))...)

	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*FSM{f, g} {
		dup := applyEntry(t, h, 5, sec, keyed("k2", lockCmd(b, 0, "r", dlmpb.Mode_MODE_EX)))[0]
		if !dup.Duplicate || dup.Lock != waiting.Lock || dup.Status != locktable.StatusQueued {
			t.Fatalf("retry of a queued request: %+v", dup)
		}
		if st := h.table.Stats(); st.Pending != 1 {
			t.Fatalf("%d pending after the retry, want 1", st.Pending)
		}
		reused := applyEntry(t, h, 6, sec, keyed("k2", lockCmd(b, 0, "other", dlmpb.Mode_MODE_EX)))[0]
		if !errors.Is(reused.Err, ErrRequestIDReused) {
			t.Fatalf("key reused for another request: %v", reused.Err)
		}
		// Released, the holder's retry answers that its lock is gone.
		mustOK(t, applyEntry(t, h, 7, sec, releaseCmd(a, held.Lock))...)
		gone := applyEntry(t, h, 8, sec, keyed("k1", lockCmd(a, 0, "r", dlmpb.Mode_MODE_EX)))[0]
		if !errors.Is(gone.Err, locktable.ErrUnknownLock) {
			t.Fatalf("retry of a released lock: %+v", gone)
		}
		granted := applyEntry(t, h, 9, sec, keyed("k2", lockCmd(b, 0, "r", dlmpb.Mode_MODE_EX)))[0]
		if !granted.Duplicate || granted.Status != locktable.StatusGranted || granted.Token <= held.Token {
			t.Fatalf("retry of a request granted since: %+v", granted)
		}
	}
}

// A session remembers its ReplyCacheSize most recent keys: older ones are
// new again.
func TestFSMKeyedCacheIsBounded(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	a := applyEntry(t, f, 1, sec, openCmd("a"))[0].Session
	index := uint64(2)
	for i := range ReplyCacheSize + 1 {
		mustOK(t, applyEntry(t, f, index, sec, keyed(fmt.Sprint("k", i), lockCmd(a, 0, fmt.Sprint("r", i), dlmpb.Mode_MODE_EX)))...)
		index++
	}
	if n := len(f.sessions[a].keyed); n != ReplyCacheSize {
		t.Fatalf("%d keyed replies kept, want %d", n, ReplyCacheSize)
	}
	again := applyEntry(t, f, index, sec, keyed("k0", lockCmd(a, 0, "r0", dlmpb.Mode_MODE_EX)))[0]
	if again.Duplicate {
		t.Fatalf("the oldest key is still remembered: %+v", again)
	}
}

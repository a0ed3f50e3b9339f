package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// TestRaiseTokens: RaiseTokensCmd lifts the token sequence above its floor
// through the log, never lowers it, refuses a floor above the cap without
// changing anything, and the raised sequence survives a snapshot.
func TestRaiseTokens(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	sid := applyEntry(t, f, 1, 1*sec, openCmd("a"))[0].Session
	lock := func(index uint64, res string) uint64 {
		t.Helper()
		r := applyEntry(t, f, index, 2*sec, lockCmd(sid, 0, res, dlmpb.Mode_MODE_EX))[0]
		mustOK(t, r)
		return r.Token
	}
	if tok := lock(2, "a"); tok != 2 {
		t.Fatalf("first token %d", tok)
	}

	r := applyEntry(t, f, 3, 3*sec, raiseCmd(5000))[0]
	if r.Err != nil || r.Token != 5000 {
		t.Fatalf("raise to 5000: %+v", r)
	}
	if tok := lock(4, "b"); tok != 5001 {
		t.Fatalf("token after a raise to 5000: %d", tok)
	}
	// A floor below the last token changes nothing.
	if r := applyEntry(t, f, 5, 4*sec, raiseCmd(7))[0]; r.Err != nil || r.Token != 5001 {
		t.Fatalf("raise to 7: %+v", r)
	}
	if tok := lock(6, "c"); tok != 5002 {
		t.Fatalf("token after a lower floor: %d", tok)
	}
	// Above the cap: refused, nothing changes.
	r = applyEntry(t, f, 7, 5*sec, raiseCmd(locktable.MaxTokenFloor+1))[0]
	if !errors.Is(r.Err, locktable.ErrTokenFloor) {
		t.Fatalf("raise above MaxTokenFloor: %+v", r)
	}
	if tok := lock(8, "d"); tok != 5003 {
		t.Fatalf("token after a refused raise: %d", tok)
	}

	// A raise survives a snapshot.
	applyEntry(t, f, 9, 6*sec, raiseCmd(1<<40))
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	r = applyEntry(t, g, 10, 7*sec, lockCmd(sid, 0, "e", dlmpb.Mode_MODE_EX))[0]
	mustOK(t, r)
	if r.Token != 1<<40+1 {
		t.Fatalf("token after restore %d, want %d", r.Token, uint64(1<<40+1))
	}
}

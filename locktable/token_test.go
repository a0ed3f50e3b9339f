package locktable

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestTokens(t *testing.T) {
	tb := New(Limits{})
	tb.OpenSession(Stamp{}, 1, "")
	tb.OpenSession(Stamp{}, 2, "")
	lock := func(st Stamp, s SessionID, name string, m driver.Mode) Result {
		t.Helper()
		r, err := tb.Lock(st, LockRequest{Session: s, Owner: OwnerID(len(name)), Resource: name, Mode: m})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// The token is the caller's index when it is ahead...
	if r := lock(Stamp{Index: 1000}, 1, "a", driver.EX); r.Token != 1000 {
		t.Fatalf("token %d, want 1000", r.Token)
	}
	// ...and last+1 otherwise: a repeated or smaller index never collides.
	if r := lock(Stamp{Index: 1000}, 1, "b", driver.EX); r.Token != 1001 {
		t.Fatalf("token %d, want 1001", r.Token)
	}
	if r := lock(Stamp{Index: 5}, 1, "c", driver.EX); r.Token != 1002 {
		t.Fatalf("token %d, want 1002", r.Token)
	}
	// A queued conversion gets the token of the operation that grants it.
	lock(Stamp{Index: 1003}, 2, "d", driver.PR)
	x := lock(Stamp{Index: 1004}, 1, "d", driver.PR)
	if r, err := tb.Convert(Stamp{Index: 1006}, ConvertRequest{Session: 1, Lock: x.Lock, Mode: driver.EX}); err != nil || r.Status != StatusQueued {
		t.Fatal(r, err)
	}
	lock(Stamp{Index: 1007}, 2, "dd", driver.PR)
	r, _ := tb.CloseSession(Stamp{Index: 1008}, 2)
	var tokens []uint64
	for _, e := range r.Events {
		if e.Kind == EventGranted {
			tokens = append(tokens, e.Token)
		}
	}
	if len(tokens) != 1 || tokens[0] != 1008 {
		t.Fatalf("tokens %v", tokens)
	}
	if tb.LastToken() != 1008 {
		t.Fatalf("last token %d", tb.LastToken())
	}
	// Tokens survive a snapshot.
	n := New(Limits{})
	if err := n.Restore(tb.Snapshot()); err != nil {
		t.Fatal(err)
	}
	n.OpenSession(Stamp{}, 3, "")
	if r, _ := n.Lock(Stamp{Index: 1}, LockRequest{Session: 3, Resource: "e", Mode: driver.EX}); r.Token != 1009 {
		t.Fatalf("token after restore %d", r.Token)
	}
}

// TestTokensWithinOneOperation: a release that wakes three PR waiters.
func TestTokensWithinOneOperation(t *testing.T) {
	h := newTest(t, 4, Limits{})
	a := h.grantedLock(1, "x", driver.EX)
	for s := SessionID(2); s <= 4; s++ {
		h.queuedLock(s, "x", driver.PR)
	}
	r := h.release(1, a)
	wantEvents(t, r, "Released#1", "Granted#2 PR", "Granted#3 PR", "Granted#4 PR")
	idx := h.idx
	if r.Events[1].Token != idx || r.Events[2].Token != idx+1 || r.Events[3].Token != idx+2 {
		t.Fatalf("tokens %d %d %d at index %d", r.Events[1].Token, r.Events[2].Token, r.Events[3].Token, idx)
	}
	// The next operation's index was already used: its token goes past.
	if r := h.lk(1, "y", driver.EX); r.Token != idx+3 {
		t.Fatalf("next token %d", r.Token)
	}
}

// TestRaiseTokens: a raise lifts the sequence above the floor, never
// lowers it, refuses a floor above MaxTokenFloor, and survives a snapshot.
func TestRaiseTokens(t *testing.T) {
	tb := New(Limits{})
	tb.OpenSession(Stamp{}, 1, "")
	lock := func(name string) uint64 {
		t.Helper()
		r, err := tb.Lock(Stamp{Index: 1}, LockRequest{Session: 1, Resource: name, Mode: driver.EX})
		if err != nil {
			t.Fatal(err)
		}
		return r.Token
	}
	if tok := lock("a"); tok != 1 {
		t.Fatalf("first token %d", tok)
	}
	if last, err := tb.RaiseTokens(Stamp{Now: 50}, 1000); err != nil || last != 1000 {
		t.Fatalf("raise to 1000: last %d, %v", last, err)
	}
	if tb.Now() != 50 {
		t.Fatalf("clock %d after a raise stamped 50", tb.Now())
	}
	if tok := lock("b"); tok != 1001 {
		t.Fatalf("token after a raise to 1000: %d", tok)
	}
	// A lower floor never lowers the sequence.
	if last, err := tb.RaiseTokens(Stamp{}, 10); err != nil || last != 1001 {
		t.Fatalf("raise to 10: last %d, %v", last, err)
	}
	if tok := lock("c"); tok != 1002 {
		t.Fatalf("token after a lower floor: %d", tok)
	}
	// The cap: MaxTokenFloor is accepted, one above is refused and changes nothing.
	if _, err := tb.RaiseTokens(Stamp{Now: 99}, MaxTokenFloor+1); !errors.Is(err, ErrTokenFloor) || !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("raise above the cap: %v", err)
	}
	if tb.LastToken() != 1002 || tb.Now() != 50 {
		t.Fatalf("a refused raise changed the table: last %d, clock %d", tb.LastToken(), tb.Now())
	}
	if last, err := tb.RaiseTokens(Stamp{}, MaxTokenFloor); err != nil || last != MaxTokenFloor {
		t.Fatalf("raise to the cap: last %d, %v", last, err)
	}
	// The raised sequence survives a snapshot.
	n := New(Limits{})
	if err := n.Restore(tb.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if n.LastToken() != MaxTokenFloor {
		t.Fatalf("last token after restore %d", n.LastToken())
	}
	n.OpenSession(Stamp{}, 2, "")
	if r, err := n.Lock(Stamp{Index: 5}, LockRequest{Session: 2, Resource: "d", Mode: driver.EX}); err != nil || r.Token != MaxTokenFloor+1 {
		t.Fatalf("token after restore %d, %v", r.Token, err)
	}
}

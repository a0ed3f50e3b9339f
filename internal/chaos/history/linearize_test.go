package history

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The second judge must be able to fail: each history below is checked by
// porcupine against the one-lock model, through Check.

func linearizability(t *testing.T, h *hist) Linearizability {
	t.Helper()
	v := check(t, h).Linearizability
	t.Logf("linearizability: %s", v)
	return v
}

func TestLinearizability(t *testing.T) {
	t.Run("ok: one after the other, and concurrent requests", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 6, 5, 30, 40).acq("c", 1, "r", 7, 6, 45, 50).
			acq("a", 2, "s", 1, 0, 10, 20)
		if v := linearizability(t, h); v.Result != porcupine.Ok || v.Ops != 8 {
			t.Errorf("verdict %s, want Ok over 8 operations", v)
		}
	})
	t.Run("illegal: two holders at once", func(t *testing.T) {
		// b was granted (15) while a held the lock (released at 20).
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 6, 12, 15, 25)
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("illegal: a token that does not grow", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 5, 22, 25, 30)
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("ok: a lost lease dropped after its deadline", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 60).deadline("a", 1, 25).lost("a", 1, "r", 55).
			acq("b", 1, "r", 6, 20, 30, 40).acq("a", 2, "r", 7, 61, 62, 70)
		if v := linearizability(t, h); v.Result != porcupine.Ok || v.Expiries != 1 {
			t.Errorf("verdict %s, want Ok with one expiry", v)
		}
	})
	t.Run("illegal: a lost lease given away before its deadline", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 60).deadline("a", 1, 45).lost("a", 1, "r", 55).
			acq("b", 1, "r", 6, 20, 30, 40)
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("ok: parts carry the last token over", func(t *testing.T) {
		// Three quiet gaps split the history; the token still has to grow
		// across them.
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 6, 30, 31, 40).acq("a", 2, "r", 9, 50, 51, 60)
		v := linearizability(t, h)
		if v.Result != porcupine.Ok || v.Pieces != 3 {
			t.Errorf("verdict %s, want Ok in 3 parts", v)
		}
		h = new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 6, 30, 31, 40).acq("a", 2, "r", 4, 50, 51, 60)
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal (token 4 after 6, in another part)", v)
		}
	})
}

// try records a strict try-lock that failed at fail (ms): refused, or
// without an answer (unsure).
func (h *hist) try(client string, lease uint64, res string, req, fail int64, unsure bool) *hist {
	h.add(Event{At: req * ms, Kind: Requested, Client: client, Lease: lease, Resource: res, Strict: true})
	return h.add(Event{At: fail * ms, Kind: AcquireFailed, Client: client, Lease: lease, Resource: res, Unsure: unsure})
}

// strict marks every request of res as the strict workload's.
func (h *hist) strict(res string) *hist {
	for i := range h.evs {
		if e := &h.evs[i]; e.Kind == Requested && e.Resource == res {
			e.Strict = true
		}
	}
	return h
}

func TestStrictLinearizability(t *testing.T) {
	t.Run("ok: refused while held, granted once free", func(t *testing.T) {
		h := new(hist).acq("a", 1, "t", 5, 0, 10, 30).try("b", 1, "t", 12, 14, false).acq("b", 2, "t", 6, 35, 36, 40).strict("t")
		v := linearizability(t, h)
		if v.Result != porcupine.Ok || v.StrictOps != 5 || v.Refusals != 1 {
			t.Errorf("verdict %s, want Ok over 5 strict operations, 1 refusal", v)
		}
	})
	t.Run("illegal: refused while free", func(t *testing.T) {
		h := new(hist).acq("a", 1, "t", 5, 0, 10, 20).try("b", 1, "t", 25, 27, false).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("illegal: refused after a release returned", func(t *testing.T) {
		// a's release returned at 20 (sent at 19): the lock is free from
		// then on, and b's try-lock at 21 must not be refused.
		h := new(hist).acq("a", 1, "t", 5, 0, 10, 19).try("b", 1, "t", 21, 22, false).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("ok: a try-lock without an answer may hold the lock for a while", func(t *testing.T) {
		// b's try-lock ended without an answer at 5; c is refused at 10
		// with no one else holding: legal, b's grant may stand until it
		// is withdrawn.
		h := new(hist).try("b", 1, "t", 0, 5, true).try("c", 1, "t", 8, 10, false).acq("c", 2, "t", 5, 30, 31, 40).strict("t")
		v := linearizability(t, h)
		if v.Result != porcupine.Ok || v.Unsure != 1 {
			t.Errorf("verdict %s, want Ok with one unsure", v)
		}
	})
	t.Run("ok: a try-lock without an answer may have done nothing", func(t *testing.T) {
		h := new(hist).try("b", 1, "t", 0, 5, true).acq("c", 1, "t", 5, 1, 3, 40).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Ok {
			t.Errorf("verdict %s, want Ok", v)
		}
	})
	t.Run("ok: a try-lock without an answer applied after its failure and others' grants", func(t *testing.T) {
		// Run A of the 2-minute runs (docs/fault-injection.md), in ms from
		// try-1#138's request: try-1's try-lock, cut short at 19 during a
		// leader kill, was sent again by its store after the reconnection
		// and applied at 332 (raft entry 688), after try-2's grants at 296
		// and 313 and the release of the second at 325; try-2#164 was
		// refused at 338 in the same entry, and try-1's store released the
		// abandoned grant at once (689) before try-1#152, asked at 340, was
		// granted (690).
		h := new(hist).try("try-1", 138, "t", 0, 19, true).
			acq("try-2", 162, "t", 672, -19, 296, 301).
			acq("try-2", 163, "t", 682, 307, 313, 319).
			try("try-2", 164, "t", 330, 338, false).
			acq("try-1", 152, "t", 690, 340, 347, 353).
			strict("t")
		v := linearizability(t, h)
		if v.Result != porcupine.Ok || v.Unsure != 1 || v.Refusals != 1 {
			t.Errorf("verdict %s, want Ok with one unsure and one refusal", v)
		}
	})
	t.Run("ok: a try-lock without an answer may take effect seconds later", func(t *testing.T) {
		// No time bounds it: b's store may send it again on every new
		// stream while b's session lives, and a given-up session's locks
		// live until the server expires it.
		h := new(hist).try("b", 1, "t", 0, 5, true).try("c", 1, "t", 3000, 3001, false).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Ok {
			t.Errorf("verdict %s, want Ok", v)
		}
	})
	t.Run("illegal: a failed try-lock left the lock held past its client's next grant", func(t *testing.T) {
		// b's next try-lock was granted at 100 and released at 110: b's
		// unanswered one was applied before it, if at all, and its hold
		// had ended. c's refusal at 3000, nobody holding, is illegal.
		h := new(hist).try("b", 1, "t", 0, 5, true).acq("b", 2, "t", 7, 90, 100, 110).
			try("c", 1, "t", 3000, 3001, false).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("illegal: refused after its client's next grant, whatever the other clients' unanswered calls", func(t *testing.T) {
		// a's unanswered try-lock bounds nothing of b's: b's own next
		// grant (100) ends b's possible hold; a's lasts until a's next
		// grant (200). d's refusal at 250 finds the lock free.
		h := new(hist).try("a", 1, "t", 0, 5, true).try("b", 1, "t", 1, 6, true).
			acq("b", 2, "t", 7, 90, 100, 110).acq("a", 2, "t", 8, 190, 200, 210).
			try("d", 1, "t", 150, 160, false).try("d", 2, "t", 250, 260, false).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
	t.Run("illegal: two holders at once", func(t *testing.T) {
		h := new(hist).acq("a", 1, "t", 5, 0, 10, 20).acq("b", 1, "t", 6, 12, 15, 25).strict("t")
		if v := linearizability(t, h); v.Result != porcupine.Illegal {
			t.Errorf("verdict %s, want Illegal", v)
		}
	})
}

// TestRecordedRefusalWhileFree is a piece of a real history, from a
// 30-minute dlm-chaos run of 2026-12-06 (every fault; the nodes' data on
// tmpfs, in 64 KiB log segments): the leader (node-1) was killed 4 ms
// after it granted try-1 the lock; try-1's release returned nil 159 ms
// later; the new leader (node-3, elected with the vote of node-1, just
// restarted) refused every try-lock for 74 ms with nobody holding the
// lock. After its barrier, node-3 logged a last token (12098160439) below
// tokens node-1 had granted and answered in its term (up to 12098160527):
// its log lacked acknowledged entries of node-1's term, and node-1's vote
// says node-1's own log, after the kill, lacked them too. The nodes' log
// lines of that second are beside it
// (testdata/strict-refused-while-free.nodes.log). The judge must call the
// piece Illegal; the cause is open (docs/fault-injection.md).
func TestRecordedRefusalWhileFree(t *testing.T) {
	f, err := os.Open("testdata/strict-refused-while-free.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := ReadEvents(f)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(evs, CheckConfig{}).Linearizability
	t.Logf("linearizability: %s", v)
	if v.Result != porcupine.Illegal || !strings.Contains(v.Illegal, "try-1#28233") {
		t.Fatalf("verdict %s, want Illegal from try-1's lease 28233", v)
	}
}

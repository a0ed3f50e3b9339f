package history

import (
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

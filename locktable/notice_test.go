package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestBlockingNotices(t *testing.T) {
	h := newTest(t, 5, Limits{})
	a := h.grantedLock(1, "x", driver.PR)
	h.grantedLock(2, "x", driver.CR)
	// An EX request is blocked by both holders: each is told once.
	wantEvents(t, h.lk(3, "x", driver.EX), "Blocking#1 EX", "Blocking#2 EX")
	// Another EX, and a PW (covered: yielding to EX yields to PW too),
	// tell nobody again.
	h.queuedLock(4, "x", driver.EX)
	wantEvents(t, h.lk(5, "x", driver.PW))
	// A's mode changes: it is told again about what it still blocks.
	wantEvents(t, h.cv(1, a, driver.CR), "Granted#1 CR conv", "Blocking#1 EX")
}

func TestBlockingNoticeModes(t *testing.T) {
	h := newTest(t, 4, Limits{})
	h.grantedLock(1, "x", driver.CR)
	// CR blocks EX only.
	wantEvents(t, h.lk(2, "x", driver.PW), "Granted#2 PW")
	h.release(2, 2)
	h.grantedLock(3, "x", driver.CW)
	// PR conflicts with the CW holder only; then EX is a second notice for
	// C (yielding to PR does not yield to EX) and a first one for A.
	wantEvents(t, h.lk(4, "x", driver.PR), "Blocking#3 PR")
	wantEvents(t, h.lk(2, "x", driver.EX), "Blocking#1 EX", "Blocking#3 EX")
}

// TestNoticeToNewHolder: a lock granted from a queue while others still
// wait is told at once.
func TestNoticeToNewHolder(t *testing.T) {
	h := newTest(t, 3, Limits{})
	a := h.grantedLock(1, "x", driver.EX)
	h.queuedLock(2, "x", driver.PR)
	h.queuedLock(3, "x", driver.EX)
	wantEvents(t, h.release(1, a), "Released#1", "Granted#2 PR", "Blocking#2 EX")
}

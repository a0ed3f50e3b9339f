package locktable

import (
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// The modes, their names and the compatibility matrix are tested in package
// driver; these tests check what the table derives from them.

// TestMasksFollowTheMatrix: the table's masks say what driver.Compatible
// says, for every pair of modes.
func TestMasksFollowTheMatrix(t *testing.T) {
	for held := driver.NL; held <= driver.EX; held++ {
		for req := driver.NL; req <= driver.EX; req++ {
			if got, want := compatible(held, req), driver.Compatible(held, req); got != want {
				t.Errorf("compatible(%v, %v) = %v, driver.Compatible says %v", held, req, got, want)
			}
		}
	}
}

// TestMatrixGrants checks the matrix through the table: a request is
// granted at once exactly when it is compatible with the holder.
func TestMatrixGrants(t *testing.T) {
	for held := driver.NL; held <= driver.EX; held++ {
		for req := driver.NL; req <= driver.EX; req++ {
			h := newTest(t, 2, Limits{})
			h.grantedLock(1, "x", held)
			r := h.lock(LockRequest{Session: 2, Resource: "x", Mode: req, Flags: NoQueue})
			if driver.Compatible(held, req) {
				wantStatus(t, r, StatusGranted)
			} else {
				wantErr(t, r, ErrWouldBlock)
			}
		}
	}
}

func TestDownConversions(t *testing.T) {
	down := map[[2]driver.Mode]bool{
		{driver.EX, driver.PW}: true, {driver.EX, driver.PR}: true, {driver.EX, driver.CW}: true, {driver.EX, driver.CR}: true, {driver.EX, driver.NL}: true,
		{driver.PW, driver.PR}: true, {driver.PW, driver.CW}: true, {driver.PW, driver.CR}: true, {driver.PW, driver.NL}: true,
		{driver.PR, driver.CR}: true, {driver.PR, driver.NL}: true, {driver.CW, driver.CR}: true, {driver.CW, driver.NL}: true, {driver.CR, driver.NL}: true,
	}
	for from := driver.NL; from <= driver.EX; from++ {
		for to := driver.NL; to <= driver.EX; to++ {
			if from == to {
				continue
			}
			if got := isDownConversion(from, to); got != down[[2]driver.Mode{from, to}] {
				t.Errorf("isDownConversion(%v, %v) = %v", from, to, got)
			}
		}
	}
}

package server

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm/locktable"
)

// TestRestoreFloor: the margin grows with the state's age at the token
// rate, plus the slack; it is bounded; the operator's floor wins when
// higher; the floor never passes MaxTokenFloor on its own.
func TestRestoreFloor(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := now.Add(-10 * time.Second).UnixNano()
	slack := uint64(TokenMarginSlack.Seconds())
	for _, c := range []struct {
		name                string
		last                uint64
		clock               int64
		rate                int64
		operator            uint64
		wantFloor, wantMarg uint64
	}{
		{"10s old", 500, clock, 1000, 0, 500 + (10+slack)*1000, (10 + slack) * 1000},
		{"clock ahead of the leader", 500, now.Add(time.Hour).UnixNano(), 1000, 0, 500 + slack*1000, slack * 1000},
		{"no clock yet", 0, 0, 1000, 0, slack * 1000, slack * 1000},
		{"operator higher", 500, clock, 1000, 1 << 50, 1 << 50, (10 + slack) * 1000},
		{"ancient: bounded", 500, 1, 1 << 40, 0, 500 + MaxTokenMargin, MaxTokenMargin},
		{"at the cap", locktable.MaxTokenFloor - 5, clock, 1000, 0, locktable.MaxTokenFloor, (10 + slack) * 1000},
	} {
		floor, margin := restoreFloor(c.last, c.clock, now, c.rate, c.operator)
		if floor != c.wantFloor || margin != c.wantMarg {
			t.Errorf("%s: floor %d margin %d, want %d and %d", c.name, floor, margin, c.wantFloor, c.wantMarg)
		}
		if floor < c.last {
			t.Errorf("%s: floor %d below the last token %d", c.name, floor, c.last)
		}
	}
}

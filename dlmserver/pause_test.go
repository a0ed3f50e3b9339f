package dlmserver

import (
	"testing"
	"time"
)

// TestNextPause: the pauses between connection rounds double up to 1 s
// while no server answers, and up to 250 ms while servers answer but none
// leads (a leader that serves briefly between elections is found soon).
func TestNextPause(t *testing.T) {
	for _, c := range []struct {
		pause      time.Duration
		leaderless bool
		want       time.Duration
	}{
		{50 * time.Millisecond, false, 100 * time.Millisecond},
		{800 * time.Millisecond, false, time.Second},
		{time.Second, false, time.Second},
		{50 * time.Millisecond, true, 100 * time.Millisecond},
		{200 * time.Millisecond, true, 250 * time.Millisecond},
		{time.Second, true, 250 * time.Millisecond}, // an election after an outage
	} {
		if got := nextPause(c.pause, c.leaderless); got != c.want {
			t.Errorf("nextPause(%s, leaderless %v) = %s, want %s", c.pause, c.leaderless, got, c.want)
		}
	}
}

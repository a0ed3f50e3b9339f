package dlm_test

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

func TestExponentialBackoffFullJitter(t *testing.T) {
	s := dlm.ExponentialBackoff(10*time.Millisecond, 80*time.Millisecond)
	bounds := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, b := range bounds {
		attempt := i + 1
		bound := b * time.Millisecond
		var lo, hi time.Duration = bound, 0
		for range 2000 {
			d := s.Backoff(attempt)
			if d < 0 || d > bound {
				t.Fatalf("attempt %d: pause %s outside [0, %s]", attempt, d, bound)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter spreads over the whole range.
		if lo > bound/10 || hi < bound*9/10 {
			t.Fatalf("attempt %d: pauses span only [%s, %s] of [0, %s]", attempt, lo, hi, bound)
		}
	}
	if d := s.Backoff(1000); d < 0 || d > 80*time.Millisecond {
		t.Fatalf("huge attempt count: pause %s", d)
	}
}

func TestExponentialBackoffClampsBadArguments(t *testing.T) {
	s := dlm.ExponentialBackoff(0, -time.Second)
	for attempt := 1; attempt < 100; attempt++ {
		if d := s.Backoff(attempt); d < 0 || d > time.Millisecond {
			t.Fatalf("attempt %d: pause %s, want within [0, 1ms]", attempt, d)
		}
	}
}

func TestLinearAndNoRetry(t *testing.T) {
	if d := dlm.LinearBackoff(7 * time.Millisecond).Backoff(5); d != 7*time.Millisecond {
		t.Fatalf("linear: %s", d)
	}
	if d := dlm.NoRetry().Backoff(1); d >= 0 {
		t.Fatalf("NoRetry: %s, want negative", d)
	}
}

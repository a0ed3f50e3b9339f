package dlm

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides the pause before the next attempt. It holds no state:
// the caller counts the attempts, so one strategy may serve any number of
// concurrent calls.
type RetryStrategy interface {
	// Backoff returns the pause after the given failed attempt (counted from
	// 1), or a negative duration to stop trying.
	Backoff(attempt int) time.Duration
}

// RetryFunc adapts a function to RetryStrategy.
type RetryFunc func(attempt int) time.Duration

// Backoff calls f.
func (f RetryFunc) Backoff(attempt int) time.Duration { return f(attempt) }

// ExponentialBackoff doubles the pause from base up to max and draws each
// pause uniformly from [0, that bound] ("full jitter"), so that contenders
// spread out instead of retrying in step.
// A base below one millisecond is taken as one millisecond, and a max
// below base as base.
func ExponentialBackoff(base, max time.Duration) RetryStrategy {
	base = later(base, time.Millisecond)
	max = later(max, base)
	return RetryFunc(func(attempt int) time.Duration {
		bound := max
		if attempt < 62 {
			if b := base << (attempt - 1); b > 0 && b < max {
				bound = b
			}
		}
		if bound <= 0 {
			return 0
		}
		return rand.N(bound + 1)
	})
}

// LinearBackoff pauses d between attempts.
func LinearBackoff(d time.Duration) RetryStrategy {
	return RetryFunc(func(int) time.Duration { return d })
}

// NoRetry makes one attempt only, whatever the wait.
func NoRetry() RetryStrategy {
	return RetryFunc(func(int) time.Duration { return -1 })
}

func later(d, floor time.Duration) time.Duration {
	if d < floor {
		return floor
	}
	return d
}

package history

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds. Every process of a run (the
// harness, the fenced store, each client) shares one host and so one
// monotonic clock: events stamped by different processes compare directly,
// which is what makes "did A still believe it held the lock when B was
// granted it?" measurable. The clock does not jump with the wall clock.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("history: CLOCK_MONOTONIC: " + err.Error()) // never on Linux
	}
	return ts.Nano()
}

// Since returns the time elapsed since the monotonic instant at.
func Since(at int64) time.Duration { return time.Duration(Now() - at) }

// Monotonic returns the instant t on the clock of Now, from the time left
// until t (t's own monotonic reading where it has one).
func Monotonic(t time.Time) int64 { return Now() + int64(time.Until(t)) }

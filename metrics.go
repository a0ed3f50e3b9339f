package dlm

import "time"

// Outcome is how an Acquire call ended.
type Outcome string

// Acquire outcomes, as metrics label values.
const (
	// OutcomeAcquired: the lock was granted.
	OutcomeAcquired Outcome = "acquired"
	// OutcomeContended: someone else held the lock until the wait ended.
	OutcomeContended Outcome = "contended"
	// OutcomeFailed: the store was unavailable, or the call was invalid.
	OutcomeFailed Outcome = "failed"
)

// Metrics receives the client's measurements. Implementations must be safe
// for concurrent use and fast; package dlmprom provides one for Prometheus.
// store is the store's name (such as "redis").
type Metrics interface {
	// Acquired records one Acquire call: its outcome and how long it took.
	Acquired(store string, outcome Outcome, d time.Duration)
	// Renewed records one renewal attempt and whether it succeeded.
	Renewed(store string, ok bool)
	// Released records one Release that reached the store successfully.
	Released(store string)
	// Lost records one lease that was lost.
	Lost(store string)
}

type nopMetrics struct{}

func (nopMetrics) Acquired(string, Outcome, time.Duration) {}
func (nopMetrics) Renewed(string, bool)                    {}
func (nopMetrics) Released(string)                         {}
func (nopMetrics) Lost(string)                             {}

package redlock

import "time"

// Defaults of the store's options.
const (
	// DefaultPrefix is the prefix of every key the store writes.
	DefaultPrefix = "dlm:"
	// DefaultDriftFactor is the share of the TTL set aside for clock drift.
	DefaultDriftFactor = 0.01
	// DefaultNodeTimeout is the longest automatic per-node timeout; shorter
	// TTLs get a tenth of the TTL. It bounds the wait for a node's answer,
	// not the answer's speed: with calls in parallel and the quorum counted
	// as answers arrive, a slow or dead node costs nothing while a quorum
	// answers. It is 250 ms rather than Redlock's suggested few tens of ms
	// because a client's own connection pool queues calls: 64 concurrent
	// lockers on a 2-core machine overran 50 ms, cold, in the comparison
	// benchmarks.
	DefaultNodeTimeout = 250 * time.Millisecond
	// DefaultFenceRetention is how long a resource's token counter is kept
	// on each node after its last grant.
	DefaultFenceRetention = 7 * 24 * time.Hour
	// DefaultQueueRefresh is how often a waiter refreshes its place in
	// the nodes' wait lists; a node drops a waiter that has not done so
	// for four times as long.
	DefaultQueueRefresh = 500 * time.Millisecond
)

// minDrift is added to the drift allowance whatever the TTL, as in the
// Redlock description.
const minDrift = 2 * time.Millisecond

// Option configures a Store.
type Option func(*Store)

// WithNodeTimeout bounds each call to one node. It should be small against
// the TTL: an answer that takes most of the TTL leaves no validity. By
// default (or with zero) it is a tenth of the TTL, at most 250 ms
// (DefaultNodeTimeout); on slow links between client and nodes, raise it and
// the TTL together.
func WithNodeTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// WithDriftFactor sets the share of the TTL set aside for clock drift
// between the client and the nodes; 2 ms are added to it. It must lie in
// [0, 0.5); the default is 0.01. The dlm client computes its leases'
// deadlines with its own allowance (1% + 2 ms); a larger factor here makes
// the store refuse grants that leave less validity, not shorten the
// deadlines.
func WithDriftFactor(f float64) Option { return func(s *Store) { s.driftFactor = f } }

// WithPrefix sets the prefix of every key the store writes; the default is
// "dlm:". It must not contain '{' or '}'.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithFenceRetention sets how long each node keeps a resource's token
// counter after its last grant; the default is 7 days. It must be at least
// one minute.
func WithFenceRetention(d time.Duration) Option { return func(s *Store) { s.retention = d } }

// WithRestartGuard keeps a node that is new, restarted or flushed from
// voting for d, which must be at least the longest TTL any client uses on
// these nodes (see the package documentation). Zero, the default, turns the
// guard off. With it on, every acquire and extend also reads the node's
// birth marker, in the same round trip.
func WithRestartGuard(d time.Duration) Option { return func(s *Store) { s.guard = d } }

// WithQueueRefresh sets how often a waiter of AcquireWait attempts again
// when no wake-up came, which also refreshes its place in the nodes' wait
// lists; a node drops a waiter silent for four times d, so a waiter that
// died holds the others back for at most that long. The default is 500 ms
// (DefaultQueueRefresh); it must be at least one millisecond.
func WithQueueRefresh(d time.Duration) Option { return func(s *Store) { s.refresh = d } }

// Package memory is a dlm store that keeps its locks in process, in the same
// lock table (package locktable) that the dlm server replicates. It serves
// tests and single-process programs: every lock mode with conversion, counting
// semaphores, FIFO queues with grants pushed to the waiter, real timers for
// TTLs and wait deadlines, fencing tokens that strictly increase for the
// life of the store, blocking notices, deadlock detection, and watches that
// are pushed, never polled.
//
// # Sessions and TTLs
//
// An acquisition without a driver.Request.Group is a table session of its
// own: its TTL starts when it is granted, Extend restarts it, and when it
// runs out the table releases the lock and grants what became grantable.
//
// The acquisitions of one Group (one dlm.Owner) share one table session
// and one owner of the table's wait-for graph. The session is opened by the
// group's first acquisition and closed as soon as the group has no lock and
// no request left, so a group costs nothing once idle. Each lock of a group
// keeps its own TTL: when one runs out, that lock alone is released and the
// group's other locks stay held.
//
// # Deadlocks
//
// Deadlock detection sees conversion deadlocks (two PR holders both
// converting to EX: the second is refused with ErrDeadlock) and, among
// groups, any cycle: if group A holds x and waits for y, group B holding y
// is refused at once with ErrDeadlock when it asks for x, and so on around
// rings of any length. The error names the group and, when a search of
// the table bounded to 10 000 locks finds it, the resources of the cycle
// in wait order: `(group 3f…; cycle through "x", "y")`.
//
// A group is one owner, so it must not wait on itself: asking, with
// AcquireWait, for a lock that the group already holds in a conflicting
// mode (an EX lock taken again by another acquisition of the same group)
// is refused at once with ErrDeadlock; with Acquire it is ErrTaken like
// any try-lock that would wait. A compatible mode (PR beside PR) is granted
// as for anyone, if nothing is queued. A group is assumed to wait for one
// thing at a time, as a thread of control does: with several requests of
// one group waiting at once, a cycle closed by a later grant is not seen,
// and only the requests' deadlines end it.
//
// # Notices and watches
//
// Every grant carries a Blocking channel, closed when a request that the
// holder's mode blocks queues behind it (for a semaphore, a request that
// does not fit), or at once if the grant is made while such a request
// waits; a conversion that changes the mode returns a fresh one. Watch
// pushes a signal on every change of a resource, from the same table
// events, with no polling; Inspect reads one resource, and Relabel changes
// a holder's metadata in place. In listings, the Session of a grouped
// holder or waiter is its Group.
//
// # Limits
//
// The lock table's limits apply (see WithLimits): in particular a group
// holds at most Limits.MaxLocksPerSession locks and requests at once
// (10 000 by default), and the store at most Limits.MaxSessions groups and
// ungrouped acquisitions together. Watches are bounded by WithMaxWatches.
package memory

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/indexheap"
	"github.com/dlmhq/dlm/locktable"
)

var (
	_ driver.Driver    = (*Store)(nil)
	_ driver.Waiter    = (*Store)(nil)
	_ driver.Converter = (*Store)(nil)
	_ driver.Featurer  = (*Store)(nil)
	_ driver.Inspector = (*Store)(nil)
	_ driver.Relabeler = (*Store)(nil)
	_ driver.Watcher   = (*Store)(nil)
)

// Store is an in-process lock store. It implements driver.Driver,
// driver.Waiter, driver.Converter, driver.Lister, driver.Inspector,
// driver.Relabeler and driver.Watcher, and offers semaphores, blocking
// notices and deadlock detection among groups. It is safe for concurrent
// use.
type Store struct {
	epoch time.Time // table time is nanoseconds since epoch, monotonic

	mu       sync.Mutex
	tab      *locktable.Table
	byOwner  map[string]*entry
	byLock   map[locktable.LockID]*entry
	groups   map[string]*group
	expiry   indexheap.Heap[*entry]
	timer    *time.Timer
	session  locktable.SessionID // the last session id used
	watches  map[string]map[*watch]struct{}
	nWatches int
	maxWatch int
	closed   bool
}

// entry is one acquisition: its lock, its session and its TTL.
type entry struct {
	owner   string
	meta    string // the request's metadata, for List and Inspect
	res     string // the resource
	group   *group // nil for an acquisition that is a session of its own
	prev    *entry // in the group's list
	next    *entry
	session locktable.SessionID
	lock    locktable.LockID
	ttl     time.Duration
	expires int64        // table time; valid while granted
	index   int          // in the expiry heap, -1 when not in it
	wait    chan outcome // non-nil while a lock or conversion is pending
	// blocking is closed at the first blocking notice for the lock in its
	// current mode (blocked then records it); a conversion that changes
	// the mode replaces it.
	blocking chan struct{}
	mode     driver.Mode // the granted mode; valid while granted
	granted  bool
	blocked  bool
}

// outcome ends a pending request.
type outcome struct {
	token    uint64
	start    time.Time // when the grant was made
	blocking <-chan struct{}
	err      error
}

// Option configures a Store.
type Option func(*config)

type config struct {
	limits     locktable.Limits
	maxWatches int
}

// maxName is the longest resource name by default: the 512 bytes that
// package dlm accepts (dlm.MaxResourceBytes), not the table's own default.
const maxName = 512

// DefaultMaxWatches is the number of watches a store keeps at once unless
// WithMaxWatches says otherwise.
const DefaultMaxWatches = 100_000

// WithLimits sets the lock table's limits (name length, locks per session,
// waiters per resource, resources, sessions); zero fields keep the
// defaults: 512-byte names, and the locktable defaults for the rest.
func WithLimits(l locktable.Limits) Option { return func(c *config) { c.limits = l } }

// WithMaxWatches bounds the watches alive at once, over all resources
// (DefaultMaxWatches if n <= 0). Watch fails with ErrUnavailable beyond it.
func WithMaxWatches(n int) Option { return func(c *config) { c.maxWatches = n } }

// New returns an empty store. Close it to stop its timer.
func New(opts ...Option) *Store {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.limits.MaxNameLen == 0 {
		c.limits.MaxNameLen = maxName
	}
	if c.maxWatches <= 0 {
		c.maxWatches = DefaultMaxWatches
	}
	s := &Store{
		epoch:    time.Now(),
		tab:      locktable.New(c.limits),
		byOwner:  make(map[string]*entry),
		byLock:   make(map[locktable.LockID]*entry),
		groups:   make(map[string]*group),
		watches:  make(map[string]map[*watch]struct{}),
		maxWatch: c.maxWatches,
	}
	s.timer = time.AfterFunc(time.Hour, s.tick)
	s.timer.Stop()
	return s
}

// Name returns "memory".
func (s *Store) Name() string { return "memory" }

// Features returns FeatureSemaphores, FeatureBlocking and
// FeatureDeadlocks.
func (s *Store) Features() driver.Feature {
	return driver.FeatureSemaphores | driver.FeatureBlocking | driver.FeatureDeadlocks
}

// Close releases every lock, fails every pending request, closes every
// watch and stops the store's timer. Calls after Close fail with
// ErrUnavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.timer.Stop()
	for _, e := range s.byOwner {
		s.finish(e, outcome{err: fmt.Errorf("%w: memory store closed", driver.ErrUnavailable)})
	}
	clear(s.byOwner)
	clear(s.byLock)
	clear(s.groups)
	s.closeWatches()
	return nil
}

// now returns the stamp of the current moment in table time.
func (s *Store) now() locktable.Stamp {
	return locktable.Stamp{Now: int64(time.Since(s.epoch)) + 1}
}

// usable reports why the store cannot serve a call, if so.
func (s *Store) usable() error {
	if s.closed {
		return fmt.Errorf("%w: memory store closed", driver.ErrUnavailable)
	}
	return nil
}

// tableErr puts a lock table error in the driver's terms. The table's
// errors match the driver errors they mean (see package locktable's
// errors); tableErr names that one first, as every store's errors do, and
// keeps the table's error matchable behind it. Of the table's errors that
// mean no driver error, an unknown session is a lock not held (a session
// ends with its acquisition, or with its group's last), and the rest are
// refused arguments.
func tableErr(err error) error {
	base := driver.ErrInvalid
	switch {
	case errors.Is(err, locktable.ErrUnknownSession):
		base = driver.ErrNotHeld
	case errors.Is(err, driver.ErrTaken):
		base = driver.ErrTaken
	case errors.Is(err, driver.ErrDeadlock):
		base = driver.ErrDeadlock
	case errors.Is(err, driver.ErrUnavailable):
		base = driver.ErrUnavailable
	case errors.Is(err, driver.ErrNotHeld):
		base = driver.ErrNotHeld
	}
	return fmt.Errorf("%w: %w", base, err)
}

// Package memory is a dlm store that keeps its locks in process, in the same
// lock table (package locktable) that the dlm server replicates. It serves
// tests and single-process programs: every lock mode with conversion, counting
// semaphores, FIFO queues with grants pushed to the waiter, real timers for
// TTLs and wait deadlines, and fencing tokens that strictly increase for the
// life of the store.
//
// Each acquisition is a session of its own in the table: its TTL starts when
// it is granted, Extend restarts it, and when it runs out the table releases
// the lock and grants what became grantable. Deadlock detection therefore
// sees conversion deadlocks (two PR holders both converting to EX: the second
// is refused with ErrDeadlock).
package memory

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Store is an in-process lock store. It implements driver.Driver,
// driver.Waiter and driver.Converter, and offers semaphores. It is safe for
// concurrent use.
type Store struct {
	epoch time.Time // table time is nanoseconds since epoch, monotonic

	mu      sync.Mutex
	tab     *locktable.Table
	byOwner map[string]*entry
	byLock  map[locktable.LockID]*entry
	expiry  expiryHeap
	timer   *time.Timer
	session locktable.SessionID // the last session id used
	closed  bool
}

// entry is one acquisition: its session, its lock and its TTL.
type entry struct {
	owner   string
	meta    string // the request's metadata, for List
	session locktable.SessionID
	lock    locktable.LockID
	ttl     time.Duration
	granted bool
	expires int64        // table time; valid while granted
	index   int          // in the expiry heap, -1 when not in it
	wait    chan outcome // non-nil while a lock or conversion is pending
}

// outcome ends a pending request.
type outcome struct {
	token uint64
	start time.Time // when the grant was made
	err   error
}

// Option configures a Store.
type Option func(*config)

type config struct{ limits locktable.Limits }

// maxName is the longest resource name by default: the 512 bytes that
// package dlm accepts (dlm.MaxResourceBytes), not the table's own default.
const maxName = 512

// WithLimits sets the lock table's limits (name length, locks per session,
// waiters per resource, resources, sessions); zero fields keep the
// defaults: 512-byte names, and the locktable defaults for the rest.
func WithLimits(l locktable.Limits) Option { return func(c *config) { c.limits = l } }

// New returns an empty store. Close it to stop its timer.
func New(opts ...Option) *Store {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.limits.MaxNameLen == 0 {
		c.limits.MaxNameLen = maxName
	}
	s := &Store{
		epoch:   time.Now(),
		tab:     locktable.New(c.limits),
		byOwner: make(map[string]*entry),
		byLock:  make(map[locktable.LockID]*entry),
	}
	s.timer = time.AfterFunc(time.Hour, s.tick)
	s.timer.Stop()
	return s
}

// Name returns "memory".
func (s *Store) Name() string { return "memory" }

// Features returns FeatureSemaphores.
func (s *Store) Features() driver.Feature { return driver.FeatureSemaphores }

// Close releases every lock, fails every pending request, and stops the
// store's timer. Calls after Close fail with ErrUnavailable.
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
// mean no driver error, an unknown session is a lock not held (each
// acquisition is a session of its own, which ends with it), and the rest
// are refused arguments.
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

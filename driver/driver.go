// Package driver defines the interface between package dlm and its lock
// stores, in the manner of database/sql/driver.
//
// A store does one attempt of one primitive at a time and says precisely what
// happened; package dlm owns validation, retries, timers, renewal, metrics and
// the errors users see. Applications do not use this package directly.
package driver

import (
	"context"
	"time"
)

// Request describes one lock request. Package dlm validates every field
// before a store sees it.
type Request struct {
	// Resource is the name of the lock: non-empty, valid UTF-8, bounded in
	// length (see dlm.MaxResourceBytes).
	Resource string
	// Owner is a 128-bit random value in lower-case hex (32 characters),
	// unique to this acquisition. Stores check it on extend and release.
	Owner string
	// Mode is the requested lock mode. A store that cannot provide it
	// returns ErrUnsupported.
	Mode Mode
	// TTL is how long the store keeps the lock without a renewal.
	TTL time.Duration
	// Metadata is a free-form description of the owner that listing tools
	// show. It may be empty.
	Metadata string
	// Capacity, when non-zero, makes the resource a counting semaphore of
	// Capacity permits, of which the request takes Permits; Mode is then
	// ignored. Package dlm sends it only to stores whose Features include
	// FeatureSemaphores.
	Capacity int
	// Permits is the number of permits a semaphore request takes.
	Permits int
	// Group, when not empty, names the unit of work the request belongs to
	// (dlm.Owner): every request of one Group is one owner in the wait-for
	// graph of a store that detects deadlocks, so that a request which
	// would make the group wait on itself, through other groups, is
	// refused with ErrDeadlock. It is a 128-bit random value in lower-case
	// hex, like Owner; Owner stays unique to each acquisition. Stores
	// without deadlock detection ignore it.
	Group string
}

// Grant is what a store returns for a granted request.
type Grant struct {
	// Token is the fencing token of the grant. Each store documents how it
	// grows.
	Token uint64
	// Handle is the store's own state for the grant. Package dlm passes it
	// back unchanged to Extend and Release.
	Handle any
	// Start is a moment no later than the one from which the store counts
	// the lock's TTL. Zero means the start of the call that returned the
	// grant, which is right for a single attempt; a store that waits
	// natively sets it to the start of the request that was granted, or of
	// the last renewal it made while waiting.
	Start time.Time
	// Lost, if not nil, is closed by the store when it learns that the
	// grant is gone before package dlm released it: a release pushed by
	// the store, a session that could not be kept alive. Package dlm then
	// ends the lease as lost at once instead of at its next renewal. A
	// Converter returns the same channel for the converted grant.
	Lost <-chan struct{}
	// LostContext, if not nil, is done when the grant is lost, and Lost is
	// its Done channel. Package dlm then learns of the loss through
	// context.AfterFunc, which costs no goroutine per lease: a store whose
	// grants share one loss (a session's lease) sets it, so that its many
	// leases do not each keep a goroutine waiting on the same channel.
	LostContext context.Context
	// Blocking, if not nil, is closed by the store when a request queues
	// behind this grant in a mode that conflicts with it (another
	// requester waits for the holder to yield). A Converter returns a
	// fresh channel with a grant whose mode changed. Stores that cannot
	// see their waiters leave it nil (see FeatureBlocking).
	Blocking <-chan struct{}
	// WatchBlocking, if not nil, starts what closes Blocking. Package dlm
	// calls it once, when the holder first asks for the channel
	// (Lease.Blocking), so that a store whose notice costs work for every
	// grant (a watch) does that work only for the holders that look. It
	// must not block, and it does nothing once the grant was released.
	// Stores that close Blocking without being asked leave it nil.
	WatchBlocking func()
}

// Driver is a lock store. Its methods are called concurrently.
//
// Errors: a lock held by someone else is ErrTaken; a store that cannot be
// reached, or that cannot decide (no quorum), is ErrUnavailable wrapped around
// the cause; an owner check that fails is ErrNotHeld. A method whose context
// ends returns an error that wraps the context's error.
type Driver interface {
	// Acquire makes one attempt to take the lock and does not wait.
	// Re-acquiring with the Owner of a lock already held succeeds with its
	// current token, so that an attempt whose reply was lost can be retried.
	Acquire(ctx context.Context, req Request) (Grant, error)
	// Extend resets the lock's time to live to req.TTL if req.Owner still
	// holds it; otherwise it returns ErrNotHeld.
	Extend(ctx context.Context, req Request, g Grant) error
	// Release frees the lock if req.Owner holds it; otherwise it returns
	// ErrNotHeld.
	Release(ctx context.Context, req Request, g Grant) error
}

// Waiter is implemented by stores that can wait for a lock natively (a queue
// in the store, a pushed grant) instead of being polled.
type Waiter interface {
	// AcquireWait blocks until the lock is granted or ctx ends. When ctx
	// ends first it returns an error that wraps both ErrTaken and ctx.Err(),
	// and leaves nothing of the request behind in the store.
	AcquireWait(ctx context.Context, req Request) (Grant, error)
}

// Converter is implemented by stores that can change the mode of a held
// lock.
type Converter interface {
	// Convert changes the mode of the lock granted as g to mode, waiting
	// until the new mode can be granted or ctx ends. It returns the grant in
	// the new mode; an up-conversion has a new, larger token. A conversion
	// that would deadlock fails with ErrDeadlock; one whose ctx ends fails
	// with an error wrapping ErrTaken and ctx.Err(). In both cases the lock
	// stays held in its old mode.
	Convert(ctx context.Context, req Request, g Grant, mode Mode) (Grant, error)
}

// Feature is something a store offers beyond exclusive locks.
type Feature uint

// Features a store may declare.
const (
	// FeatureSemaphores: the store honours Request.Capacity and Permits.
	FeatureSemaphores Feature = 1 << iota
	// FeatureBlocking: the store sets Grant.Blocking and closes it when a
	// conflicting request queues behind the holder.
	FeatureBlocking
	// FeatureDeadlocks: the store detects deadlocks among the owners of
	// Request.Group.
	FeatureDeadlocks
)

// Featurer is implemented by stores that declare features.
type Featurer interface {
	// Features returns the features the store offers.
	Features() Feature
}

// Has reports whether d declares feature f.
func Has(d Driver, f Feature) bool {
	fd, ok := d.(Featurer)
	return ok && fd.Features()&f != 0
}

// Drifter is implemented by stores that allow for clock drift differently
// from package dlm's default of 1% of the TTL plus 2 ms.
type Drifter interface {
	// Drift returns the allowance subtracted from a lock's validity.
	Drift(ttl time.Duration) time.Duration
}

// Validator is implemented by stores whose locks live as long as something
// of the store's own that the client keeps alive apart from Extend, such as
// the dlm server's sessions: Extend then succeeds without renewing
// anything, and the lock is valid only as long as that other thing is.
type Validator interface {
	// ValidUntil returns until when the client knows g to be held (the
	// validity of what keeps it alive, allowance for drift deducted), or
	// the zero time if the store cannot tell.
	ValidUntil(req Request, g Grant) time.Time
}

// Namer is implemented by stores that have a short name for metrics and
// logs, such as "redis".
type Namer interface {
	// Name returns the store's name.
	Name() string
}

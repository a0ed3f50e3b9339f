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
}

// Grant is what a store returns for a granted request.
type Grant struct {
	// Token is the fencing token of the grant. Each store documents how it
	// grows.
	Token uint64
	// Handle is the store's own state for the grant. Package dlm passes it
	// back unchanged to Extend and Release.
	Handle any
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

// Namer is implemented by stores that have a short name for metrics and
// logs, such as "redis".
type Namer interface {
	// Name returns the store's name.
	Name() string
}

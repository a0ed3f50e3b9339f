package dlm

import (
	"errors"

	"github.com/dlmhq/dlm/driver"
)

// Errors returned by the client, to be matched with errors.Is. The store
// errors are the same values as those of package driver.
var (
	// ErrNotAcquired means someone else held the lock for as long as the
	// caller was willing to wait. When the context ended the wait, the error
	// also matches ctx.Err().
	ErrNotAcquired = errors.New("dlm: lock not acquired")
	// ErrLost means a lease ended without being released: it expired without
	// a renewal, the store gave the lock away, or the store was unreachable
	// past the lease's validity.
	ErrLost = errors.New("dlm: lock lost")
	// ErrNotHeld means an owner check failed: the caller does not hold the
	// lock.
	ErrNotHeld = driver.ErrNotHeld
	// ErrUnavailable means the store could not be reached or could not
	// decide. It is never used for contention.
	ErrUnavailable = driver.ErrUnavailable
	// ErrDeadlock means the request (a lock or a conversion) would close a
	// cycle of owners waiting for each other and was refused; a refused
	// conversion leaves the lock held in its old mode.
	ErrDeadlock = driver.ErrDeadlock
	// ErrInvalid means an argument was rejected; the message says which one
	// and why.
	ErrInvalid = driver.ErrInvalid
	// ErrUnsupported means the store cannot do what was asked, such as a lock
	// mode it has no equivalent for.
	ErrUnsupported = driver.ErrUnsupported
)

package driver

import "errors"

// Errors a store returns. Package dlm re-exports the ones users see, so a
// caller matches them with errors.Is against either package's names. They
// are the one vocabulary of the project: the lock table's errors (package
// locktable) match the one they mean, and the dlm server's client (package
// remote) maps the server's refusal reasons onto them.
var (
	// ErrTaken means the lock is held by another owner (or, with queueing,
	// others are ahead): contention, not failure.
	ErrTaken = errors.New("dlm: lock is held by another owner")
	// ErrNotHeld means an owner check failed: the lock is not held by the
	// caller (it expired, or another owner holds it).
	ErrNotHeld = errors.New("dlm: lock not held")
	// ErrUnavailable means the store could not be reached or could not
	// decide, for example without a quorum, or reached a configured limit
	// that released locks may lift. It is never used for contention.
	ErrUnavailable = errors.New("dlm: lock store unavailable")
	// ErrUnsupported means the store cannot do what was asked, such as a lock
	// mode it has no equivalent for.
	ErrUnsupported = errors.New("dlm: not supported by this store")
	// ErrDeadlock means the request would close a cycle of owners waiting
	// for each other, and was refused.
	ErrDeadlock = errors.New("dlm: deadlock")
	// ErrInvalid means an argument was rejected; the wrapping message says
	// which one and why.
	ErrInvalid = errors.New("dlm: invalid argument")
)

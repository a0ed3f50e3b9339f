package dlmserver

import (
	"fmt"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// ErrStorage means the server refused a request because it cannot write
// its log: its disk is full or failing (REASON_STORAGE). It matches
// driver.ErrUnavailable (dlm.ErrUnavailable): the store goes on to another
// server of the cluster, and package dlm retries with backoff, since the
// server serves again once its writes succeed. The wrapping message names
// the cause (such as "no space left on device").
var ErrStorage error = &storageError{}

// storageError is ErrStorage's type: it matches driver.ErrUnavailable.
type storageError struct{}

// Error returns the refusal's message.
func (*storageError) Error() string {
	return "dlm server: the server's disk is full or its log cannot be written"
}

// Is matches driver.ErrUnavailable.
func (*storageError) Is(target error) bool { return target == driver.ErrUnavailable }

// reasonHeader is the trailer naming a refusal's reason (the server's
// ReasonHeader).
const reasonHeader = "dlm-reason"

// refusal is the error for a refusal on the session stream: the error its
// reason stands for (see reasonError) with the server's message.
func refusal(r *dlmpb.Refused) error {
	return fmt.Errorf("%w: dlm server refused (%s): %s", reasonError(r.GetReason()), r.GetReason(), r.GetMessage())
}

// reasonError is the store's one table from the server's reasons to its
// errors. The reasons of the lock table get the driver error that the lock
// table's own error matches (package locktable's errors: WOULD_BLOCK is
// driver.ErrTaken, NOT_OWNER driver.ErrNotHeld, NAME_TOO_LONG
// driver.ErrInvalid...); the limits and quotas are ErrLimit, which matches
// driver.ErrUnavailable as the table's limits do. The reasons the table
// leaves to its user (UNKNOWN_SESSION, SESSION_EXISTS, NOT_PENDING) and the
// server's own (NOT_LEADER, STALE_REQUEST...) say that the server cannot
// take the request now: driver.ErrUnavailable.
func reasonError(r dlmpb.Reason) error {
	switch r {
	case dlmpb.Reason_REASON_WOULD_BLOCK:
		return driver.ErrTaken
	case dlmpb.Reason_REASON_DEADLOCK:
		return driver.ErrDeadlock
	case dlmpb.Reason_REASON_UNKNOWN_LOCK, dlmpb.Reason_REASON_NOT_OWNER, dlmpb.Reason_REASON_NOT_GRANTED:
		return driver.ErrNotHeld
	case dlmpb.Reason_REASON_INVALID, dlmpb.Reason_REASON_INVALID_MODE, dlmpb.Reason_REASON_NAME_TOO_LONG,
		dlmpb.Reason_REASON_KIND_MISMATCH, dlmpb.Reason_REASON_CAPACITY_MISMATCH, dlmpb.Reason_REASON_CONVERSION_PENDING,
		dlmpb.Reason_REASON_REQUEST_ID_REUSED:
		return driver.ErrInvalid
	case dlmpb.Reason_REASON_LIMIT, dlmpb.Reason_REASON_TOO_MANY_LOCKS, dlmpb.Reason_REASON_TOO_MANY_WAITERS,
		dlmpb.Reason_REASON_TOO_MANY_RESOURCES, dlmpb.Reason_REASON_TOO_MANY_SESSIONS, dlmpb.Reason_REASON_TOO_MANY_HOLDERS,
		dlmpb.Reason_REASON_QUOTA:
		return ErrLimit
	case dlmpb.Reason_REASON_PERMISSION_DENIED:
		return ErrPermissionDenied
	case dlmpb.Reason_REASON_STORAGE:
		return ErrStorage
	default:
		return driver.ErrUnavailable
	}
}

package fsm

import (
	"errors"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// reasons maps errors to protocol reason codes. It is read-only. The specific
// limit errors come before locktable.ErrLimit, which they all match.
var reasons = [...]struct {
	err    error
	reason dlmpb.Reason
}{
	{locktable.ErrWouldBlock, dlmpb.Reason_REASON_WOULD_BLOCK},
	{locktable.ErrDeadlock, dlmpb.Reason_REASON_DEADLOCK},
	{locktable.ErrInvalidMode, dlmpb.Reason_REASON_INVALID_MODE},
	{locktable.ErrInvalidArgument, dlmpb.Reason_REASON_INVALID},
	{ErrInvalidCommand, dlmpb.Reason_REASON_INVALID},
	{locktable.ErrUnknownSession, dlmpb.Reason_REASON_UNKNOWN_SESSION},
	{locktable.ErrUnknownLock, dlmpb.Reason_REASON_UNKNOWN_LOCK},
	{locktable.ErrNotOwner, dlmpb.Reason_REASON_NOT_OWNER},
	{locktable.ErrNotGranted, dlmpb.Reason_REASON_NOT_GRANTED},
	{locktable.ErrConversionPending, dlmpb.Reason_REASON_CONVERSION_PENDING},
	{locktable.ErrNotPending, dlmpb.Reason_REASON_NOT_PENDING},
	{locktable.ErrKindMismatch, dlmpb.Reason_REASON_KIND_MISMATCH},
	{locktable.ErrCapacityMismatch, dlmpb.Reason_REASON_CAPACITY_MISMATCH},
	{locktable.ErrSessionExists, dlmpb.Reason_REASON_SESSION_EXISTS},
	{locktable.ErrNameTooLong, dlmpb.Reason_REASON_NAME_TOO_LONG},
	{locktable.ErrTooManyLocks, dlmpb.Reason_REASON_TOO_MANY_LOCKS},
	{locktable.ErrTooManyHolders, dlmpb.Reason_REASON_TOO_MANY_HOLDERS},
	{locktable.ErrTooManyWaiters, dlmpb.Reason_REASON_TOO_MANY_WAITERS},
	{locktable.ErrTooManyResources, dlmpb.Reason_REASON_TOO_MANY_RESOURCES},
	{locktable.ErrTooManySessions, dlmpb.Reason_REASON_TOO_MANY_SESSIONS},
	{locktable.ErrLimit, dlmpb.Reason_REASON_LIMIT},
	{ErrStaleRequest, dlmpb.Reason_REASON_STALE_REQUEST},
	{ErrQuota, dlmpb.Reason_REASON_QUOTA},
	{ErrRequestIDReused, dlmpb.Reason_REASON_REQUEST_ID_REUSED},
}

// ReasonOf returns the protocol reason code of err: REASON_UNSPECIFIED for
// nil or an error with no code.
func ReasonOf(err error) dlmpb.Reason {
	if err == nil {
		return dlmpb.Reason_REASON_UNSPECIFIED
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return dlmpb.Reason_REASON_UNSPECIFIED
}

// ErrorOf returns the error a reason code stands for: nil for
// REASON_UNSPECIFIED, ErrInvalidCommand for an unknown code. ErrorOf and
// ReasonOf are inverse for every error of the table above.
func ErrorOf(r dlmpb.Reason) error {
	if r == dlmpb.Reason_REASON_UNSPECIFIED {
		return nil
	}
	for _, e := range reasons {
		if e.reason == r {
			return e.err
		}
	}
	return ErrInvalidCommand
}

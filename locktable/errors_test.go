package locktable

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// TestErrorVocabulary pins which driver error each of the table's sentinels
// matches: exactly that one, or none on purpose. A store built on the table
// (the memory store) branches on these; the dlm server's reasons, which its
// client maps back to driver errors, agree with them.
func TestErrorVocabulary(t *testing.T) {
	drivers := []error{driver.ErrTaken, driver.ErrNotHeld, driver.ErrUnavailable,
		driver.ErrUnsupported, driver.ErrDeadlock, driver.ErrInvalid}
	for _, c := range []struct {
		sentinel, want error // want nil: matches no driver error
	}{
		{ErrInvalidMode, driver.ErrInvalid},
		{ErrInvalidArgument, driver.ErrInvalid},
		{ErrWouldBlock, driver.ErrTaken},
		{ErrDeadlock, driver.ErrDeadlock},
		{ErrUnknownSession, nil},
		{ErrSessionExists, nil},
		{ErrUnknownLock, driver.ErrNotHeld},
		{ErrNotOwner, driver.ErrNotHeld},
		{ErrNotGranted, driver.ErrNotHeld},
		{ErrConversionPending, driver.ErrInvalid},
		{ErrNotPending, nil},
		{ErrKindMismatch, driver.ErrInvalid},
		{ErrCapacityMismatch, driver.ErrInvalid},
		{ErrMalformedSnapshot, nil},
		{ErrLimit, driver.ErrUnavailable},
		{ErrNameTooLong, driver.ErrInvalid},
		{ErrTooManyLocks, driver.ErrUnavailable},
		{ErrTooManyHolders, driver.ErrUnavailable},
		{ErrTooManyWaiters, driver.ErrUnavailable},
		{ErrTooManyResources, driver.ErrUnavailable},
		{ErrTooManySessions, driver.ErrUnavailable},
	} {
		// As the table returns them: wrapped with details.
		err := fmt.Errorf("%w: session 7", c.sentinel)
		for _, d := range drivers {
			if got := errors.Is(err, d); got != (d == c.want) {
				t.Errorf("errors.Is(%q, %q) = %v", err, d, got)
			}
		}
		if !errors.Is(err, c.sentinel) {
			t.Errorf("%q does not match its own sentinel", err)
		}
	}
}

// TestLimitErrors: every limit sentinel matches ErrLimit, and no other
// sentinel does.
func TestLimitErrors(t *testing.T) {
	for _, err := range []error{ErrNameTooLong, ErrTooManyLocks, ErrTooManyHolders,
		ErrTooManyWaiters, ErrTooManyResources, ErrTooManySessions} {
		if !errors.Is(err, ErrLimit) || errors.Is(ErrLimit, err) {
			t.Errorf("%q: matches ErrLimit %v, matched by it %v", err, errors.Is(err, ErrLimit), errors.Is(ErrLimit, err))
		}
	}
	for _, err := range []error{ErrInvalidMode, ErrInvalidArgument, ErrWouldBlock, ErrDeadlock,
		ErrUnknownSession, ErrSessionExists, ErrUnknownLock, ErrNotOwner, ErrNotGranted,
		ErrConversionPending, ErrNotPending, ErrKindMismatch, ErrCapacityMismatch, ErrMalformedSnapshot} {
		if errors.Is(err, ErrLimit) {
			t.Errorf("%q matches ErrLimit", err)
		}
	}
}

package locktable

import "github.com/dlmhq/dlm/driver"

// Errors returned by the Table, to be matched with errors.Is. Returned
// errors usually wrap one of these with details (which session, which
// limit). An operation that returns an error changes nothing but the table
// clock (see Stamp) and returns no events.
//
// The table's errors are part of the vocabulary of package driver: each
// sentinel that means a driver error also matches it, as its documentation
// says (ErrWouldBlock matches driver.ErrTaken, for example), so that a
// store built on the table branches on the driver's errors alone. The
// sentinels that match none are the table's own business, which a store
// must put in its own terms.
var (
	// ErrInvalidMode means a mode is not one of NL, CR, CW, PR, PW, EX. It
	// matches driver.ErrInvalid.
	ErrInvalidMode error = &tableError{"locktable: invalid lock mode", driver.ErrInvalid}
	// ErrInvalidArgument means an argument is malformed: an empty resource
	// name, session id 0, unknown flag bits, zero permits... It matches
	// driver.ErrInvalid.
	ErrInvalidArgument error = &tableError{"locktable: invalid argument", driver.ErrInvalid}
	// ErrWouldBlock means the request cannot be granted now and was not
	// queued, because it asked not to (NoQueue) or because its deadline has
	// already passed. It is returned unwrapped. It matches driver.ErrTaken.
	ErrWouldBlock error = &tableError{"locktable: would block", driver.ErrTaken}
	// ErrDeadlock means granting or queueing the request would close a cycle
	// in the wait-for graph. Nothing was queued; a refused conversion leaves
	// the lock granted in its old mode. It matches driver.ErrDeadlock.
	ErrDeadlock error = &tableError{"locktable: deadlock", driver.ErrDeadlock}
	// ErrUnknownSession means the session is not open. It matches no driver
	// error: what a store's caller sees depends on what the store's sessions
	// are (the memory store's end with their lock; the dlm server's outlive
	// a stream).
	ErrUnknownSession error = &tableError{"locktable: unknown session", nil}
	// ErrSessionExists means OpenSession was given an id already in use. It
	// matches no driver error: session ids are the store's choice.
	ErrSessionExists error = &tableError{"locktable: session already open", nil}
	// ErrUnknownLock means no lock or request has this id (it may have been
	// released, cancelled or timed out). It matches driver.ErrNotHeld.
	ErrUnknownLock error = &tableError{"locktable: unknown lock", driver.ErrNotHeld}
	// ErrNotOwner means the lock belongs to another session. A session can
	// never release, convert or cancel another session's lock. It matches
	// driver.ErrNotHeld.
	ErrNotOwner error = &tableError{"locktable: lock belongs to another session", driver.ErrNotHeld}
	// ErrNotGranted means a conversion was asked of a request still waiting
	// for its first grant. It matches driver.ErrNotHeld.
	ErrNotGranted error = &tableError{"locktable: lock is not granted yet", driver.ErrNotHeld}
	// ErrConversionPending means a conversion was asked of a lock that
	// already has one queued. Cancel it first. It matches driver.ErrInvalid.
	ErrConversionPending error = &tableError{"locktable: conversion already pending", driver.ErrInvalid}
	// ErrNotPending means Cancel found nothing queued on the lock. It
	// matches no driver error: the driver has no cancel, and a store that
	// cancels on its caller's behalf decides what it means.
	ErrNotPending error = &tableError{"locktable: nothing pending to cancel", nil}
	// ErrKindMismatch means a lock operation was aimed at a semaphore or a
	// semaphore operation at a lock resource. It matches driver.ErrInvalid.
	ErrKindMismatch error = &tableError{"locktable: resource kind mismatch", driver.ErrInvalid}
	// ErrCapacityMismatch means a semaphore request named a capacity other
	// than the one the semaphore was created with. It matches
	// driver.ErrInvalid.
	ErrCapacityMismatch error = &tableError{"locktable: semaphore capacity mismatch", driver.ErrInvalid}
	// ErrMalformedSnapshot means Restore was given bytes that are not a
	// valid snapshot. The table is left unchanged. It matches no driver
	// error: snapshots are not a store's caller's business.
	ErrMalformedSnapshot error = &tableError{"locktable: malformed snapshot", nil}
	// ErrTokenFloor means RaiseTokens was given a floor above
	// MaxTokenFloor. The table is left unchanged. It matches
	// driver.ErrInvalid.
	ErrTokenFloor error = &tableError{"locktable: token floor too high", driver.ErrInvalid}

	// ErrLimit is matched by every limit error below: errors.Is(err,
	// ErrLimit) tells "a configured bound was hit" from other refusals. It
	// matches driver.ErrUnavailable, as the limits do but ErrNameTooLong:
	// locks released elsewhere may make room, so a caller may try again.
	ErrLimit error = &tableError{"locktable: limit exceeded", driver.ErrUnavailable}
	// ErrNameTooLong means a resource name or session label is longer
	// than Limits.MaxNameLen bytes. It matches driver.ErrInvalid: no retry
	// makes a name shorter.
	ErrNameTooLong error = &limitError{tableError{"locktable: name too long", driver.ErrInvalid}}
	// ErrTooManyLocks means the session already has Limits.MaxLocksPerSession
	// locks and requests, or the whole table already has Limits.MaxLocks
	// (the message says which). It matches driver.ErrUnavailable.
	ErrTooManyLocks error = &limitError{tableError{"locktable: too many locks", driver.ErrUnavailable}}
	// ErrTooManyHolders means the resource already has
	// Limits.MaxLocksPerResource locks (granted, converting or waiting). It
	// matches driver.ErrUnavailable.
	ErrTooManyHolders error = &limitError{tableError{"locktable: too many locks on resource", driver.ErrUnavailable}}
	// ErrTooManyWaiters means the resource already has
	// Limits.MaxWaitersPerResource queued requests and conversions. It
	// matches driver.ErrUnavailable.
	ErrTooManyWaiters error = &limitError{tableError{"locktable: too many waiters on resource", driver.ErrUnavailable}}
	// ErrTooManyResources means the table already has Limits.MaxResources
	// resources. It matches driver.ErrUnavailable.
	ErrTooManyResources error = &limitError{tableError{"locktable: too many resources", driver.ErrUnavailable}}
	// ErrTooManySessions means the table already has Limits.MaxSessions
	// sessions. It matches driver.ErrUnavailable.
	ErrTooManySessions error = &limitError{tableError{"locktable: too many sessions", driver.ErrUnavailable}}
)

// tableError is the type of the table's sentinels: each also matches the
// driver error it means, if any.
type tableError struct {
	msg    string
	driver error // the driver error matched; nil for none
}

// Error returns the message of the sentinel.
func (e *tableError) Error() string { return e.msg }

// Is matches the driver error the sentinel means.
func (e *tableError) Is(target error) bool { return e.driver != nil && target == e.driver }

// limitError is the type of the limit sentinels: each also matches ErrLimit.
type limitError struct{ tableError }

// Is matches ErrLimit and the driver error the sentinel means.
func (e *limitError) Is(target error) bool { return target == ErrLimit || e.tableError.Is(target) }

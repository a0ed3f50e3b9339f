package locktable

import "errors"

// Errors returned by the Table, to be matched with errors.Is. Returned
// errors usually wrap one of these with details (which session, which
// limit). An operation that returns an error changes nothing but the table
// clock (see Stamp) and returns no events.
var (
	// ErrInvalidMode means a mode is not one of NL, CR, CW, PR, PW, EX.
	ErrInvalidMode = errors.New("locktable: invalid lock mode")
	// ErrInvalidArgument means an argument is malformed: an empty resource
	// name, session id 0, unknown flag bits, zero permits...
	ErrInvalidArgument = errors.New("locktable: invalid argument")
	// ErrWouldBlock means the request cannot be granted now and was not
	// queued, because it asked not to (NoQueue) or because its deadline has
	// already passed. It is returned unwrapped.
	ErrWouldBlock = errors.New("locktable: would block")
	// ErrDeadlock means granting or queueing the request would close a cycle
	// in the wait-for graph. Nothing was queued; a refused conversion leaves
	// the lock granted in its old mode.
	ErrDeadlock = errors.New("locktable: deadlock")
	// ErrUnknownSession means the session is not open.
	ErrUnknownSession = errors.New("locktable: unknown session")
	// ErrSessionExists means OpenSession was given an id already in use.
	ErrSessionExists = errors.New("locktable: session already open")
	// ErrUnknownLock means no lock or request has this id (it may have been
	// released, cancelled or timed out).
	ErrUnknownLock = errors.New("locktable: unknown lock")
	// ErrNotOwner means the lock belongs to another session. A session can
	// never release, convert or cancel another session's lock.
	ErrNotOwner = errors.New("locktable: lock belongs to another session")
	// ErrNotGranted means a conversion was asked of a request still waiting
	// for its first grant.
	ErrNotGranted = errors.New("locktable: lock is not granted yet")
	// ErrConversionPending means a conversion was asked of a lock that
	// already has one queued. Cancel it first.
	ErrConversionPending = errors.New("locktable: conversion already pending")
	// ErrNotPending means Cancel found nothing queued on the lock.
	ErrNotPending = errors.New("locktable: nothing pending to cancel")
	// ErrKindMismatch means a lock operation was aimed at a semaphore or a
	// semaphore operation at a lock resource.
	ErrKindMismatch = errors.New("locktable: resource kind mismatch")
	// ErrCapacityMismatch means a semaphore request named a capacity other
	// than the one the semaphore was created with.
	ErrCapacityMismatch = errors.New("locktable: semaphore capacity mismatch")
	// ErrMalformedSnapshot means Restore was given bytes that are not a
	// valid snapshot. The table is left unchanged.
	ErrMalformedSnapshot = errors.New("locktable: malformed snapshot")

	// ErrLimit is matched by every limit error below: errors.Is(err,
	// ErrLimit) tells "a configured bound was hit" from other refusals.
	ErrLimit = errors.New("locktable: limit exceeded")
	// ErrNameTooLong means a resource name or session label is longer
	// than Limits.MaxNameLen bytes.
	ErrNameTooLong error = &limitError{"locktable: name too long"}
	// ErrTooManyLocks means the session already has Limits.MaxLocksPerSession
	// locks and requests, or the whole table already has Limits.MaxLocks
	// (the message says which).
	ErrTooManyLocks error = &limitError{"locktable: too many locks"}
	// ErrTooManyHolders means the resource already has
	// Limits.MaxLocksPerResource locks (granted, converting or waiting).
	ErrTooManyHolders error = &limitError{"locktable: too many locks on resource"}
	// ErrTooManyWaiters means the resource already has
	// Limits.MaxWaitersPerResource queued requests and conversions.
	ErrTooManyWaiters error = &limitError{"locktable: too many waiters on resource"}
	// ErrTooManyResources means the table already has Limits.MaxResources
	// resources.
	ErrTooManyResources error = &limitError{"locktable: too many resources"}
	// ErrTooManySessions means the table already has Limits.MaxSessions
	// sessions.
	ErrTooManySessions error = &limitError{"locktable: too many sessions"}
)

// limitError is the type of the limit sentinels: each also matches ErrLimit.
type limitError struct{ msg string }

// Error returns the message of the sentinel.
func (e *limitError) Error() string { return e.msg }

// Is makes every limit sentinel match ErrLimit.
func (e *limitError) Is(target error) bool { return target == ErrLimit }

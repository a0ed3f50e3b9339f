package locktable

import "github.com/dlmhq/dlm/driver"

// SessionID identifies a session. The caller chooses it (the dlm server
// uses the Raft index of the OpenSession command); 0 is not a valid id.
type SessionID uint64

// OwnerID identifies an owner within a session: the unit of the wait-for
// graph used for deadlock detection. Use one owner per thread of control
// (per goroutine or per logical task); 0 is a valid owner.
type OwnerID uint64

// LockID identifies one lock or request. The table issues them from a
// counter, starting at 1; they are never reused.
type LockID uint64

// Stamp is the context every mutating operation carries: the caller's
// notion of time and a fencing-token base. On a Raft cluster the leader
// stamps both into the command and every replica passes the same values.
type Stamp struct {
	// Index is the token base, typically the Raft log index of the command.
	// Each grant in the operation gets the token max(last token + 1,
	// Index): tokens strictly increase whatever the caller passes, and with
	// a Raft index they are at least the index of the entry that granted
	// them. Passing 0 makes tokens a plain counter.
	Index uint64
	// Now is the time in Unix nanoseconds. The table clock is the maximum
	// of every Now seen so it never goes back; it stamps grants and
	// queueing, and decides which deadlines have passed.
	Now int64
}

// Flags modify a request.
type Flags uint8

// The request flags.
const (
	// NoQueue makes a request a try-lock: if it cannot be granted at once it
	// fails with ErrWouldBlock instead of queueing. It applies to new
	// requests, semaphore acquisitions and conversions alike.
	NoQueue Flags = 1 << iota
	// QueueConvert (the VMS QUECVT flag) makes a conversion wait behind the
	// conversions already queued, even when it is compatible with every
	// granted lock. Without it a compatible conversion is granted in place.
	// Only valid for Convert.
	QueueConvert
)

// LockRequest asks for a new lock on a lock resource.
type LockRequest struct {
	Session  SessionID   // the requesting session, which must be open
	Owner    OwnerID     // the owner within the session (deadlock detection)
	Resource string      // the resource name, 1 to Limits.MaxNameLen bytes
	Mode     driver.Mode // the requested mode
	Flags    Flags       // NoQueue only
	// Deadline is when a queued request times out, in Unix nanoseconds; 0
	// waits forever. A deadline at or before the table clock means "do not
	// wait", like NoQueue.
	Deadline int64
}

// SemaphoreRequest asks for permits of a semaphore resource.
type SemaphoreRequest struct {
	Session  SessionID // as in LockRequest
	Owner    OwnerID   // as in LockRequest
	Resource string    // as in LockRequest
	// Capacity is the semaphore's number of permits. It creates the
	// semaphore if needed; every later request must name the same value.
	Capacity uint32
	// Permits is how many permits to take, from 1 to Capacity.
	Permits  uint32
	Flags    Flags // NoQueue only
	Deadline int64 // as in LockRequest
}

// ConvertRequest asks to change the mode of a granted lock.
type ConvertRequest struct {
	Session  SessionID   // the session owning the lock
	Lock     LockID      // the granted lock to convert
	Mode     driver.Mode // the new mode
	Flags    Flags       // NoQueue, QueueConvert
	Deadline int64       // as in LockRequest
}

// Status is the outcome of a request that did not fail.
type Status uint8

// The statuses of a Result.
const (
	// StatusNone is the status of operations that grant nothing to the
	// caller (Release, Cancel, session operations, Advance).
	StatusNone Status = iota
	// StatusGranted: the lock or conversion was granted at once.
	StatusGranted
	// StatusQueued: the request waits in a queue; an EventGranted,
	// EventTimedOut or EventCancelled will follow in a later operation.
	StatusQueued
)

// String returns the name of the status.
func (s Status) String() string {
	switch s {
	case StatusGranted:
		return "Granted"
	case StatusQueued:
		return "Queued"
	}
	return "None"
}

// Result is the outcome of a mutating operation.
type Result struct {
	// Lock is the lock the request created or concerned.
	Lock LockID
	// Status says whether the request was granted or queued.
	Status Status
	// Token is the fencing token when Status is StatusGranted.
	Token uint64
	// Events are every effect of the operation, in order. The slice is
	// owned by the Table and valid only until its next mutating call: copy
	// what you keep.
	Events []Event
}

package fsm

import (
	"slices"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Result is the outcome of one applied command, returned to the proposer.
type Result struct {
	// Index is the Raft index of the entry that applied the command.
	Index uint64
	// Session is the new session of an OpenSession command, and the
	// command's session otherwise (0 for ExpireSessions and Advance).
	Session locktable.SessionID
	// Lock, Status and Token are the table's answer (see locktable.Result).
	Lock   locktable.LockID
	Status locktable.Status
	Token  uint64
	// Mode is, for a duplicate lock request or conversion answered as
	// granted, the lock's mode now (it may have been converted since); zero
	// otherwise.
	Mode driver.Mode
	// Err is the table's refusal (match with errors.Is; see ReasonOf), or
	// ErrInvalidCommand or ErrStaleRequest. A refused command changed nothing.
	Err error
	// Duplicate is true when the command repeated a request the session
	// had already sent, under the same id: nothing was applied again. For a
	// lock request or conversion that succeeded, Lock, Status, Token and
	// Mode describe the lock now, or Err says it is gone; otherwise they are
	// the first answer (Err reduced to its sentinel).
	Duplicate bool
	// Events are every effect of the command, in order, owned by the
	// Result (copied from the table). Duplicates have none.
	Events []locktable.Event
	// Resource is the resource of the lock that a lock request, a
	// conversion or a relabel concerned, when the command changed the
	// state (not refused, not a duplicate): with Events, it names every
	// resource the command changed, for watchers (a request that queues
	// and a relabel have no event of their own). "" otherwise.
	Resource string
}

// newResult copies the table's result, whose events slice the table reuses.
func newResult(index uint64, sid locktable.SessionID, r locktable.Result, err error) Result {
	return Result{
		Index:   index,
		Session: sid,
		Lock:    r.Lock,
		Status:  r.Status,
		Token:   r.Token,
		Err:     err,
		Events:  slices.Clone(r.Events),
	}
}

package fsm

import "errors"

// Errors of the state machine, to be matched with errors.Is.
var (
	// ErrMalformedCommand means a Raft log entry could not be decoded. The
	// entry changes nothing.
	ErrMalformedCommand = errors.New("dlm server: malformed command")
	// ErrInvalidCommand means a command has no operation, or one that this
	// server does not know. Its Result carries the error; it changes nothing.
	ErrInvalidCommand = errors.New("dlm server: invalid command")
	// ErrMalformedSnapshot means a snapshot could not be restored. The FSM
	// is left unchanged.
	ErrMalformedSnapshot = errors.New("dlm server: malformed snapshot")
	// ErrStaleRequest means a request (session, seq) is not among the answers
	// the session still remembers and its seq is not above the highest the
	// session used: a retry older than the reply cache, which cannot be
	// answered without risking a second effect, or a sequence number that did
	// not increase. It changes nothing.
	ErrStaleRequest = errors.New("dlm server: stale request")
	// ErrRequestIDReused means a request (session, seq) came with a sequence
	// number the session already used for a different request (another
	// resource, mode, lock...). It changes nothing; a client must use a new,
	// higher sequence number for every new request.
	ErrRequestIDReused = errors.New("dlm server: request id reused for a different request")
)

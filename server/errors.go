package server

import "errors"

// Errors of the server, to be matched with errors.Is.
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
	// ErrStaleRequest means a retried request (session, seq) is older than
	// every answer the session still remembers, so it cannot be answered
	// without risking a second effect. It changes nothing.
	ErrStaleRequest = errors.New("dlm server: stale request")
	// ErrNotLeader means this node is not the Raft leader: the command was
	// not appended and may be sent to the leader.
	ErrNotLeader = errors.New("dlm server: not the leader")
	// ErrLeadershipLost means leadership was lost while the command was in
	// flight: it may or may not have been applied. Retry with the same
	// request id to get exactly-once behaviour.
	ErrLeadershipLost = errors.New("dlm server: leadership lost, outcome unknown")
	// ErrClosed means the Node is closed.
	ErrClosed = errors.New("dlm server: node closed")
)

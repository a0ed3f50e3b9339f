package raftnode

import "errors"

// Errors of the node, to be matched with errors.Is.
var (
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

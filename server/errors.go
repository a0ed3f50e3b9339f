package server

import "errors"

// Errors of the server, to be matched with errors.Is.
var (
	// ErrBadResumeToken means a resume of a session came without its resume
	// token, or with another (gRPC PermissionDenied): nothing was attached,
	// and the session's stream was warned (REASON_BAD_RESUME_TOKEN).
	ErrBadResumeToken = errors.New("dlm server: wrong or missing resume token")
	// ErrNotLeader means this node is not the Raft leader: the command was
	// not appended and may be sent to the leader.
	ErrNotLeader = errors.New("dlm server: not the leader")
	// ErrLeadershipLost means leadership was lost while the command was in
	// flight: it may or may not have been applied. Retry with the same
	// request id to get exactly-once behaviour.
	ErrLeadershipLost = errors.New("dlm server: leadership lost, outcome unknown")
	// ErrClosed means the Node is closed.
	ErrClosed = errors.New("dlm server: node closed")
	// ErrUnauthenticated means a call or request carried no valid
	// credentials (gRPC Unauthenticated, HTTP 401). The membership calls
	// (Server.Join, RemoveMember, ClusterMembers) return it, wrapped, when
	// the cluster refuses theirs.
	ErrUnauthenticated = errors.New("dlm server: authentication required: a valid bearer token or client certificate")
	// ErrPermissionDenied means the caller's identity may not do what it
	// asked (gRPC PermissionDenied, HTTP 403); see Rules.
	ErrPermissionDenied = errors.New("dlm server: permission denied")
)

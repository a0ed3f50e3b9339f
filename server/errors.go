package server

import "errors"

// Errors of the server, to be matched with errors.Is.
var (
	// ErrBadResumeToken means a resume of a session came without its resume
	// token, or with another (gRPC PermissionDenied): nothing was attached,
	// and the session's stream was warned (REASON_BAD_RESUME_TOKEN).
	ErrBadResumeToken = errors.New("dlm server: wrong or missing resume token")
	// ErrUnauthenticated means a call or request carried no valid
	// credentials (gRPC Unauthenticated, HTTP 401). The membership calls
	// (Server.Join, RemoveMember, ClusterMembers) return it, wrapped, when
	// the cluster refuses theirs.
	ErrUnauthenticated = errors.New("dlm server: authentication required: a valid bearer token or client certificate")
	// ErrPermissionDenied means the caller's identity may not do what it
	// asked (gRPC PermissionDenied, HTTP 403); see Rules.
	ErrPermissionDenied = errors.New("dlm server: permission denied")
)

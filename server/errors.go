package server

import "errors"

// Errors of the server, to be matched with errors.Is.
var (
	// ErrBadResumeToken means a resume of a session came without its resume
	// token, or with another (gRPC PermissionDenied): nothing was attached,
	// and the session's stream was warned (REASON_BAD_RESUME_TOKEN).
	ErrBadResumeToken = errors.New("dlm server: wrong or missing resume token")
)

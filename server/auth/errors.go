package auth

import "errors"

// Errors of authentication and authorization, to be matched with
// errors.Is.
var (
	// ErrUnauthenticated means a call or request carried no valid
	// credentials (gRPC Unauthenticated, HTTP 401). The membership calls
	// (package cluster) return it, wrapped, when the cluster refuses
	// theirs.
	ErrUnauthenticated = errors.New("dlm server: authentication required: a valid bearer token or client certificate")
	// ErrPermissionDenied means the caller's identity may not do what it
	// asked (gRPC PermissionDenied, HTTP 403); see Rules.
	ErrPermissionDenied = errors.New("dlm server: permission denied")
)

package dlmserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/driver"
)

// Token limits: the server's (package server's MinTokenBytes,
// MaxTokenBytes), and the largest token file read.
const (
	MinTokenBytes     = 16
	MaxTokenBytes     = 1024
	MaxTokenFileBytes = 4096
)

// Errors of a server with authentication, to be matched with errors.Is.
// Both also match driver.ErrInvalid (dlm.ErrInvalid), so that package dlm
// does not retry them: more attempts would not change the answer.
var (
	// ErrUnauthenticated means the server wants credentials the store did
	// not send, or refused those it sent (gRPC Unauthenticated).
	ErrUnauthenticated error = &refusedError{"dlm server: not authenticated"}
	// ErrPermissionDenied means the store's identity may not do what was
	// asked: lock that name, list, or resume that session (gRPC
	// PermissionDenied, or a refused request on the session stream).
	ErrPermissionDenied error = &refusedError{"dlm server: permission denied"}
)

// ErrLimit means the server refused a request because a configured bound
// was reached: a limit of its table (locks per session or per resource,
// waiters, resources, sessions, locks on the server) or a quota of the
// store's identity (sessions, locks). It matches driver.ErrUnavailable
// (dlm.ErrUnavailable), so package dlm retries it with backoff: locks
// released elsewhere may make room. The wrapping message names the bound.
var ErrLimit error = &limitError{}

// limitError is ErrLimit's type: it matches driver.ErrUnavailable.
type limitError struct{}

// Error returns the refusal's message.
func (*limitError) Error() string { return "dlm server: limit reached" }

// Is matches driver.ErrUnavailable.
func (*limitError) Is(target error) bool { return target == driver.ErrUnavailable }

// refusedError is a refusal that retrying cannot mend: it matches
// driver.ErrInvalid without saying "invalid argument".
type refusedError struct{ msg string }

// Error returns the refusal's message.
func (e *refusedError) Error() string { return e.msg }

// Is matches driver.ErrInvalid.
func (e *refusedError) Is(target error) bool { return target == driver.ErrInvalid }

// WithTLS connects over TLS with cfg (its RootCAs verify the server; its
// Certificates, if any, are the client certificate for mutual TLS, whose
// common name the server takes as the store's identity). ServerName
// defaults to each address's host.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithToken sends token as a bearer token with every call
// ("authorization: Bearer <token>"): the server authenticates the store's
// identity from it. A token is a secret: it is only sent over TLS (see
// WithTLS); without TLS, Dial fails, unless AllowTokenOverPlaintext.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTokenFile is WithToken with the token read from a file at Dial: the
// file holds the token alone (surrounding white space is ignored), at most
// MaxTokenFileBytes.
func WithTokenFile(path string) Option { return func(o *options) { o.tokenFile = path } }

// AllowTokenOverPlaintext lets WithToken send the token over a plaintext
// connection, where anyone on the path can read it and use it. Only for a
// network you trust entirely, such as loopback in tests.
func AllowTokenOverPlaintext() Option { return func(o *options) { o.plaintextToken = true } }

// ReadTokenFile reads a token file: the token alone, surrounding white
// space ignored, at most MaxTokenFileBytes. Its errors never quote the
// file's content.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: token file: %w", driver.ErrInvalid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: token file %s: %w", driver.ErrInvalid, path, err)
	}
	if len(data) > MaxTokenFileBytes {
		return "", fmt.Errorf("%w: token file %s is larger than %d bytes", driver.ErrInvalid, path, MaxTokenFileBytes)
	}
	tok := string(bytes.TrimSpace(data))
	if err := checkToken(tok); err != nil {
		return "", fmt.Errorf("%w: token file %s: %w", driver.ErrInvalid, path, err)
	}
	return tok, nil
}

// checkToken accepts MinTokenBytes to MaxTokenBytes printable ASCII
// characters without spaces.
func checkToken(tok string) error {
	if len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes {
		return fmt.Errorf("want a token of %d to %d characters, alone in the file", MinTokenBytes, MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return errors.New("want a token of printable ASCII characters without spaces, alone in the file")
		}
	}
	return nil
}

// tokenCreds sends a bearer token with every call, as gRPC's per-RPC
// credentials: gRPC refuses to send them over a connection without
// transport security, unless plaintext is allowed.
type tokenCreds struct {
	token     string
	plaintext bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c tokenCreds) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if !c.plaintext {
		ri, _ := credentials.RequestInfoFromContext(ctx)
		if err := credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity); err != nil {
			return nil, fmt.Errorf("dlm: the token is only sent over TLS: %w", err)
		}
	}
	return map[string]string{"authorization": "Bearer " + c.token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c tokenCreds) RequireTransportSecurity() bool { return !c.plaintext }

// String keeps the token out of anything that prints the credentials.
func (c tokenCreds) String() string { return "bearer token (redacted)" }

// authError returns err as ErrUnauthenticated or ErrPermissionDenied if it
// is such a gRPC status, else nil.
func authError(err error) error {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return fmt.Errorf("%w: %s", ErrUnauthenticated, status.Convert(err).Message())
	case codes.PermissionDenied:
		return fmt.Errorf("%w: %s", ErrPermissionDenied, status.Convert(err).Message())
	}
	return nil
}

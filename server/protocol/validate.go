package protocol

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Limits of requests that the server checks at its boundary, beside the
// lock table's own: the same as the Go client's (package dlm), so that no
// client can get past the server what the Go client refuses.
const (
	// MaxCapacity is the largest number of permits of a semaphore
	// (dlm.MaxCapacity).
	MaxCapacity = 1 << 20
	// MaxMetadataBytes bounds a lock's holder description.
	MaxMetadataBytes = 1024
)

// Errors of request validation, to be matched with errors.Is. A request
// refused with one changes nothing, and the stream goes on.
var (
	// ErrInvalidRequest means a request broke a rule of the protocol or a
	// limit of this file (REASON_INVALID, gRPC InvalidArgument): a string
	// that is not UTF-8 or holds a character names may not have (see
	// package driver (CheckName)), an empty resource name, a bad duration, a
	// semaphore's capacity or permits out of range...
	ErrInvalidRequest = errors.New("dlm server: invalid request")
	// ErrBadResumeToken means a resume of a session came without its resume
	// token, or with another (gRPC PermissionDenied): nothing was attached,
	// and the session's stream was warned (REASON_BAD_RESUME_TOKEN).
	ErrBadResumeToken = errors.New("dlm server: wrong or missing resume token")
)

// invalid returns an ErrInvalidRequest saying what is wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

// validateRequest checks a session request (after the open) before it
// becomes a command: what the table would refuse only late or not at all,
// with a message naming the bad value. The lock table checks again what
// it checks (name length, modes), so that old log entries replay the same.
func validateRequest(m *dlmpb.SessionRequest) error {
	if bad := badUTF8(m); bad != "" {
		return invalid("%s", bad)
	}
	switch r := m.GetMsg().(type) {
	case *dlmpb.SessionRequest_Lock:
		return validateLock(r.Lock)
	case *dlmpb.SessionRequest_Convert:
		return validateMode("convert", r.Convert.GetMode())
	case *dlmpb.SessionRequest_Relabel:
		return validateMetadata(r.Relabel.GetMetadata())
	}
	return nil
}

// validateMetadata checks a lock's holder description, given with a lock
// request or a relabel: at most MaxMetadataBytes.
func validateMetadata(md []byte) error {
	if n := len(md); n > MaxMetadataBytes {
		return invalid("metadata is %d bytes, the limit is %d", n, MaxMetadataBytes)
	}
	return nil
}

// validateLock checks a lock request.
func validateLock(l *dlmpb.LockRequest) error {
	if err := validateName("resource name", l.GetResource()); err != nil {
		return err
	}
	capacity, permits := l.GetCapacity(), l.GetPermits()
	switch {
	case capacity == 0 && l.GetMode() == dlmpb.Mode_MODE_UNSPECIFIED:
		return invalid("a lock request needs a mode (1 to 6) or a semaphore capacity")
	case capacity > 0 && l.GetMode() != dlmpb.Mode_MODE_UNSPECIFIED:
		return invalid("mode %d with a semaphore capacity of %d: a request names a mode (lock) or a capacity (semaphore), not both", int32(l.GetMode()), capacity)
	case capacity == 0 && permits != 0:
		return invalid("%d permits without a semaphore capacity", permits)
	case capacity > MaxCapacity:
		return invalid("semaphore capacity %d is outside [1, %d]", capacity, MaxCapacity)
	case capacity > 0 && (permits < 1 || permits > capacity):
		return invalid("%d permits of a semaphore of %d: want 1 to the capacity", permits, capacity)
	}
	if capacity == 0 {
		if err := validateMode("lock", l.GetMode()); err != nil {
			return err
		}
	}
	return validateMetadata(l.GetMetadata())
}

// validateMode checks the mode of a lock or convert request.
func validateMode(what string, m dlmpb.Mode) error {
	if m < dlmpb.Mode_MODE_NL || m > dlmpb.Mode_MODE_EX {
		return fmt.Errorf("%w: %s request for mode %d: want 1 (NL) to 6 (EX)", locktable.ErrInvalidMode, what, int32(m))
	}
	return nil
}

// validateName checks a resource name: not empty, and allowed by package
// driver.CheckName. Its length is the table's to check (Limits.MaxNameLen).
func validateName(what, name string) error {
	if name == "" {
		return invalid("%s is empty", what)
	}
	if err := driver.CheckName(name); err != nil {
		return invalid("%s %q: %v", what, name, err)
	}
	return nil
}

// ValidateOpen checks the first message of a session stream, an open
// request: its label may be empty, else must be a valid name. The error
// is a gRPC status (InvalidArgument) that ends the stream.
func ValidateOpen(m *dlmpb.SessionRequest) error {
	var err error
	if bad := badUTF8(m); bad != "" {
		err = invalid("%s", bad)
	} else if lerr := driver.CheckName(m.GetOpen().GetLabel()); lerr != nil {
		err = invalid("session label %q: %v", m.GetOpen().GetLabel(), lerr)
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// ValidateListArgs checks the arguments of a listing (gRPC List, GET
// /v1/resources, GET /v1/events): a prefix is allowed by package
// driver.CheckName (it can match no other name); after, a name from an
// earlier page, need only be UTF-8, as names created before the names
// rule may hold any character.
func ValidateListArgs(prefix, after string) error {
	if err := driver.CheckName(prefix); err != nil {
		return invalid("prefix %q: %v", prefix, err)
	}
	if !utf8.ValidString(after) {
		return invalid("after %q: %v", after, driver.CheckName(after))
	}
	return nil
}

// ValidateList checks a gRPC List request: its strings, and a limit that
// is not negative (0 asks for DefaultListLimit; more than MaxListLimit
// gets MaxListLimit).
func ValidateList(l *dlmpb.ListRequest) error {
	if l.GetLimit() < 0 {
		return invalid("list limit %d is negative", l.GetLimit())
	}
	return ValidateListArgs(l.GetPrefix(), l.GetAfter())
}

// ValidateWatch checks a Watch request: the name of a resource, no
// longer than maxLen bytes (the table's Limits.MaxNameLen), which could
// never be locked.
func ValidateWatch(w *dlmpb.WatchRequest, maxLen int) error {
	name := w.GetResource()
	if bad := badUTF8(w); bad != "" {
		return invalid("%s", bad)
	}
	if err := validateName("resource name", name); err != nil {
		return err
	}
	if len(name) > maxLen {
		return fmt.Errorf("%w: resource name of %d bytes, the limit is %d", locktable.ErrNameTooLong, len(name), maxLen)
	}
	return nil
}

// ValidateUnary is a unary interceptor that refuses, with InvalidArgument,
// a request whose strings are not UTF-8 (see utf8Codec) or whose
// arguments ValidateListArgs refuses.
func ValidateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	var err error
	if m, ok := req.(proto.Message); ok {
		if bad := badUTF8(m); bad != "" {
			err = invalid("%s", bad)
		}
	}
	if l, ok := req.(*dlmpb.ListRequest); ok && err == nil {
		err = ValidateList(l)
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return next(ctx, req)
}

// RefusalReason is the reason of a request refused before it became a
// command: REASON_INVALID unless the error has a more specific one.
func RefusalReason(err error) dlmpb.Reason {
	if r := ReasonOf(err); r != dlmpb.Reason_REASON_UNSPECIFIED {
		return r
	}
	return dlmpb.Reason_REASON_INVALID
}

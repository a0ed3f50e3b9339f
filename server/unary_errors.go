package server

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/protocol"
)

// errSessionEnded is why a mailbox ends with its session.
var errSessionEnded = errors.New("dlm server: the session ended (expired, closed or ended by an administrator): its locks are lost")

// refusal is a refused unary call: a gRPC status plus, for refusals of the
// state machine, their Reason (sent as the dlm-reason header or trailer).
type refusal struct {
	code   codes.Code
	reason dlmpb.Reason
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func (r *refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

// refuse turns a refusal of the state machine (or of request validation)
// into the call's error.
func refuse(err error) error {
	reason := protocol.RefusalReason(err)
	return &refusal{code: reasonCode(reason), reason: reason, msg: err.Error()}
}

// reasonCode is the gRPC code of a refusal.
func reasonCode(r dlmpb.Reason) codes.Code {
	switch r {
	case dlmpb.Reason_REASON_INVALID, dlmpb.Reason_REASON_INVALID_MODE, dlmpb.Reason_REASON_NAME_TOO_LONG:
		return codes.InvalidArgument
	case dlmpb.Reason_REASON_DEADLOCK:
		return codes.Aborted
	case dlmpb.Reason_REASON_UNKNOWN_SESSION, dlmpb.Reason_REASON_UNKNOWN_LOCK:
		return codes.NotFound
	case dlmpb.Reason_REASON_PERMISSION_DENIED:
		return codes.PermissionDenied
	case dlmpb.Reason_REASON_LIMIT, dlmpb.Reason_REASON_TOO_MANY_LOCKS, dlmpb.Reason_REASON_TOO_MANY_WAITERS,
		dlmpb.Reason_REASON_TOO_MANY_RESOURCES, dlmpb.Reason_REASON_TOO_MANY_SESSIONS,
		dlmpb.Reason_REASON_TOO_MANY_HOLDERS, dlmpb.Reason_REASON_QUOTA:
		return codes.ResourceExhausted
	case dlmpb.Reason_REASON_NOT_LEADER, dlmpb.Reason_REASON_STORAGE:
		return codes.Unavailable
	}
	return codes.FailedPrecondition
}

// endedStatus is the error of a call whose mailbox ended with err.
func endedStatus(err error) error {
	if errors.Is(err, errSessionEnded) {
		return &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION, msg: err.Error()}
	}
	if errors.Is(err, errReplaced) {
		return status.Error(codes.Aborted, "dlm server: the session was resumed on a Session stream, which serves it now")
	}
	return endStatus(err)
}

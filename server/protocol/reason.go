package protocol

import (
	"errors"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/fsm"
)

// reasons maps the errors of the layers above the state machine to
// protocol reason codes; fsm.ReasonOf maps the state machine's and the lock
// table's. It is read-only.
var reasons = [...]struct {
	err    error
	reason dlmpb.Reason
}{
	{raftnode.ErrStorage, dlmpb.Reason_REASON_STORAGE}, // before ErrNotLeader, which it may wrap too
	{raftnode.ErrNotLeader, dlmpb.Reason_REASON_NOT_LEADER},
	{auth.ErrPermissionDenied, dlmpb.Reason_REASON_PERMISSION_DENIED},
	{ErrInvalidRequest, dlmpb.Reason_REASON_INVALID},
	{ErrBadResumeToken, dlmpb.Reason_REASON_BAD_RESUME_TOKEN},
}

// ReasonOf returns the protocol reason code of err: REASON_UNSPECIFIED for
// nil or an error with no code.
func ReasonOf(err error) dlmpb.Reason {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return fsm.ReasonOf(err)
}

package protocol

import (
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/fsm"
)

// TestEveryReasonHasAnError: every reason code of the protocol is the
// ReasonOf of some error, the state machine's (fsm.ErrorOf) or the
// service's (the reasons table).
func TestEveryReasonHasAnError(t *testing.T) {
	for code, name := range dlmpb.Reason_name {
		r := dlmpb.Reason(code)
		if r == dlmpb.Reason_REASON_UNSPECIFIED || ReasonOf(fsm.ErrorOf(r)) == r {
			continue
		}
		found := false
		for _, e := range reasons {
			found = found || (e.reason == r && ReasonOf(e.err) == r)
		}
		if !found {
			t.Errorf("%s: no error has this reason", name)
		}
	}
}

package dlmserver

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// TestReasonErrors pins the error of every reason the protocol defines, so
// that a reason added to it fails here until it is given one. The lock
// table's reasons agree with package locktable's errors (TestErrorVocabulary
// there).
func TestReasonErrors(t *testing.T) {
	want := map[dlmpb.Reason]error{
		dlmpb.Reason_REASON_WOULD_BLOCK:        driver.ErrTaken,
		dlmpb.Reason_REASON_DEADLOCK:           driver.ErrDeadlock,
		dlmpb.Reason_REASON_INVALID:            driver.ErrInvalid,
		dlmpb.Reason_REASON_INVALID_MODE:       driver.ErrInvalid,
		dlmpb.Reason_REASON_UNKNOWN_SESSION:    driver.ErrUnavailable,
		dlmpb.Reason_REASON_UNKNOWN_LOCK:       driver.ErrNotHeld,
		dlmpb.Reason_REASON_NOT_OWNER:          driver.ErrNotHeld,
		dlmpb.Reason_REASON_NOT_GRANTED:        driver.ErrNotHeld,
		dlmpb.Reason_REASON_CONVERSION_PENDING: driver.ErrInvalid,
		dlmpb.Reason_REASON_NOT_PENDING:        driver.ErrUnavailable,
		dlmpb.Reason_REASON_KIND_MISMATCH:      driver.ErrInvalid,
		dlmpb.Reason_REASON_CAPACITY_MISMATCH:  driver.ErrInvalid,
		dlmpb.Reason_REASON_SESSION_EXISTS:     driver.ErrUnavailable,
		dlmpb.Reason_REASON_LIMIT:              ErrLimit,
		dlmpb.Reason_REASON_NAME_TOO_LONG:      driver.ErrInvalid,
		dlmpb.Reason_REASON_TOO_MANY_LOCKS:     ErrLimit,
		dlmpb.Reason_REASON_TOO_MANY_WAITERS:   ErrLimit,
		dlmpb.Reason_REASON_TOO_MANY_RESOURCES: ErrLimit,
		dlmpb.Reason_REASON_TOO_MANY_SESSIONS:  ErrLimit,
		dlmpb.Reason_REASON_STALE_REQUEST:      driver.ErrUnavailable,
		dlmpb.Reason_REASON_NOT_LEADER:         driver.ErrUnavailable,
		dlmpb.Reason_REASON_PERMISSION_DENIED:  ErrPermissionDenied,
		dlmpb.Reason_REASON_BAD_RESUME_TOKEN:   driver.ErrUnavailable,
		dlmpb.Reason_REASON_REQUEST_ID_REUSED:  driver.ErrInvalid,
		dlmpb.Reason_REASON_TOO_MANY_HOLDERS:   ErrLimit,
		dlmpb.Reason_REASON_QUOTA:              ErrLimit,
		dlmpb.Reason_REASON_STORAGE:            ErrStorage,
		dlmpb.Reason_REASON_UNSPECIFIED:        driver.ErrUnavailable,
	}
	for n := range dlmpb.Reason_name {
		r := dlmpb.Reason(n)
		w, ok := want[r]
		if !ok {
			t.Errorf("%v: no error pinned for it here", r)
			continue
		}
		err := refusal(&dlmpb.Refused{Reason: r, Message: "the details"})
		if errors.Unwrap(err) != w || !strings.HasSuffix(err.Error(), ": dlm server refused ("+r.String()+"): the details") {
			t.Errorf("%v: %v, want %v", r, err, w)
		}
	}
}

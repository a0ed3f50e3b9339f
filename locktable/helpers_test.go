package locktable

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// brief formats events compactly for assertions: "Granted#3 PR",
// "Blocking#1 EX", "Released#1", "Cancelled#4", "TimedOut#4 conv",
// "SessionClosed s1". Tokens are checked separately.
func brief(evs []Event) []string {
	var out []string
	for _, e := range evs {
		var s string
		switch e.Kind {
		case EventSessionClosed, EventSessionExpired:
			s = fmt.Sprintf("%v s%d", e.Kind, e.Session)
		default:
			s = fmt.Sprintf("%v#%d", e.Kind, e.Lock)
			if e.Kind == EventGranted || e.Kind == EventBlocking {
				if e.Mode != 0 {
					s += " " + e.Mode.String()
				} else {
					s += fmt.Sprintf(" %dp", e.Permits)
				}
			}
			if e.Conversion {
				s += " conv"
			}
		}
		out = append(out, s)
	}
	return out
}

func wantEvents(t *testing.T, r res, want ...string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("unexpected error %v", r.err)
	}
	if got := brief(r.Events); !slices.Equal(got, want) {
		t.Fatalf("events:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

func wantErr(t *testing.T, r res, want error) {
	t.Helper()
	if !errors.Is(r.err, want) {
		t.Fatalf("error %v, want %v", r.err, want)
	}
}

func wantStatus(t *testing.T, r res, want Status) LockID {
	t.Helper()
	if r.err != nil {
		t.Fatalf("unexpected error %v", r.err)
	}
	if r.Status != want {
		t.Fatalf("status %v, want %v (events %v)", r.Status, want, brief(r.Events))
	}
	return r.Lock
}

// newTest returns a harness with sessions 1..n open.
func newTest(t *testing.T, n int, lim Limits) *harness {
	h := newHarness(t, lim)
	for id := range n {
		if err := h.open(SessionID(id + 1)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// lk asks for a lock with owner 0 and no flags.
func (h *harness) lk(s SessionID, name string, m driver.Mode) res {
	h.tb.Helper()
	return h.lock(LockRequest{Session: s, Resource: name, Mode: m})
}

// grantedLock asks for a lock that must be granted at once.
func (h *harness) grantedLock(s SessionID, name string, m driver.Mode) LockID {
	h.tb.Helper()
	r := h.lk(s, name, m)
	if r.err != nil || r.Status != StatusGranted {
		h.tb.Fatalf("lock %v on %q for session %d: %v %v", m, name, s, r.Status, r.err)
	}
	return r.Lock
}

// queuedLock asks for a lock that must be queued.
func (h *harness) queuedLock(s SessionID, name string, m driver.Mode) LockID {
	h.tb.Helper()
	r := h.lk(s, name, m)
	if r.err != nil || r.Status != StatusQueued {
		h.tb.Fatalf("lock %v on %q for session %d: %v %v", m, name, s, r.Status, r.err)
	}
	return r.Lock
}

func (h *harness) cv(s SessionID, id LockID, m driver.Mode) res {
	h.tb.Helper()
	return h.convert(ConvertRequest{Session: s, Lock: id, Mode: m})
}

// state returns the state and granted mode of a lock.
func (h *harness) state(id LockID) (LockState, driver.Mode) {
	li, ok := h.t.Describe(id)
	if !ok {
		return 0, 0
	}
	return li.State, li.Mode
}

package dlmserver_test

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
)

// A lock of the dlm server lives as long as its session: a lease with a
// TTL longer than the session's must not claim a deadline past the
// session's validity, which only acknowledged keepalives extend.
func TestDeadlineIsTheSessionValidity(t *testing.T) {
	// A session TTL that keepalives keep ahead of now however loaded the
	// machine, and a lock TTL much longer.
	const sessionTTL = 5 * time.Second
	c, _ := newClient(t, dlmserver.WithSessionTTL(sessionTTL))
	l, err := c.Acquire(t.Context(), "validity/"+t.Name(), dlm.WithTTL(time.Minute), dlm.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if d := time.Until(l.Deadline()); d > sessionTTL || d <= 0 {
		t.Fatalf("deadline in %s, want within the session TTL of %s", d, sessionTTL)
	}
}

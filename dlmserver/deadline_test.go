package dlmserver_test

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// A lease's deadline never moves later because the store stopped vouching
// for the lock. With a lock TTL of a minute, the deadline is the session's
// validity; once keepalives stall and the session ends, the store can no
// longer tell, and the deadline must stay at the last validity (in the
// past), not fall back to the lock's own TTL a minute away. (The fault
// harness saw that fallback as a holder believing in a lock past the next
// grant.)
func TestDeadlineStaysAfterLoss(t *testing.T) {
	const ttl = 2 * time.Second
	proxy := testenv.StartProxy(t, shared.Addr())
	c := dlm.New(dial(t, proxy.Addr(), dlmserver.WithSessionTTL(ttl)))
	ctx := storetest.Context(t)
	l, err := c.Acquire(ctx, storetest.Resource(t), dlm.WithTTL(time.Minute), dlm.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	before := l.Deadline()
	if time.Until(before) > ttl {
		t.Fatalf("deadline in %s, want within the session TTL %s", time.Until(before), ttl)
	}
	proxy.Stall()
	defer proxy.Resume()
	storetest.Within(t, l.Lost(), ttl+10*time.Second, "Lost after keepalives stalled")
	after := l.Deadline()
	if !after.Before(time.Now()) || after.Before(before) {
		t.Fatalf("after the loss the deadline is %s from now, want the last validity (%s from now)",
			time.Until(after).Round(time.Millisecond), time.Until(before).Round(time.Millisecond))
	}
}

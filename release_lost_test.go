package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// sessionLosingDriver grants from its Driver with a Lost channel of its
// own. The first Release of a grant goes unanswered (ErrUnavailable); during
// the next, the store reports the grant gone (a session it could not keep
// alive) and answers ErrNotHeld, as the dlm server store does for a lock of
// a session it gave up, which the server still holds until it expires
// that session.
type sessionLosingDriver struct {
	driver.Driver
	mu    sync.Mutex
	lost  map[uint64]chan struct{} // by token
	tries map[uint64]int
}

func (d *sessionLosingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := d.Driver.Acquire(ctx, req)
	if err != nil {
		return g, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan struct{})
	d.lost[g.Token] = ch
	g.Lost, g.LostContext = ch, nil
	return g, nil
}

func (d *sessionLosingDriver) Release(_ context.Context, _ driver.Request, g driver.Grant) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries[g.Token]++
	if d.tries[g.Token] == 1 {
		return fmt.Errorf("%w: no answer", driver.ErrUnavailable)
	}
	close(d.lost[g.Token])
	return fmt.Errorf("%w: the session was lost", driver.ErrNotHeld)
}

// A Release that had no answer, called again after the store reported the
// grant gone (its session lost), returns the loss, not nil: the lock goes
// free when the store lets the session go, and a nil Release promises that
// it is free already. Before, the second Release returned nil whenever it
// ran before the lease saw the store's report.
func TestReleaseAfterTheStoreLostTheGrantReturnsTheLoss(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	d := &sessionLosingDriver{Driver: mem, lost: map[uint64]chan struct{}{}, tries: map[uint64]int{}}
	c := dlm.New(d)
	ctx := context.Background()
	for i := range 100 {
		l, err := c.Acquire(ctx, fmt.Sprintf("r%d", i), dlm.WithTTL(time.Minute), dlm.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); !errors.Is(err, dlm.ErrUnavailable) {
			t.Fatalf("first release: %v, want ErrUnavailable", err)
		}
		if err := l.Release(ctx); !errors.Is(err, dlm.ErrLost) {
			t.Fatalf("lease %d: the release after the store lost the grant returned %v, want ErrLost", i, err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatalf("lease %d: Lost() not closed", i)
		}
	}
}

package dlm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// queueFor starts o's acquisition of resource in a goroutine; the returned
// channel gets its outcome.
func queueFor(o *dlm.Owner, resource string) <-chan error {
	out := make(chan error, 1)
	go func() {
		l, err := o.Acquire(context.Background(), resource, dlm.WithWait(30*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		out <- err
	}()
	return out
}

func TestOwnersInARingAreRefusedAsADeadlock(t *testing.T) {
	for _, n := range []int{2, 3} {
		c, st := memoryClient(t)
		ctx := context.Background()
		names := []string{"x", "y", "z"}[:n]
		owners := make([]*dlm.Owner, n)
		leases := make([]*dlm.Lease, n)
		for i := range owners {
			owners[i] = c.Owner()
			l, err := owners[i].Acquire(ctx, names[i])
			if err != nil {
				t.Fatal(err)
			}
			leases[i] = l
		}
		// Owner i waits for the next one's lock, but the last.
		waits := make([]<-chan error, n-1)
		for i := 0; i < n-1; i++ {
			waits[i] = queueFor(owners[i], names[i+1])
			waitQueued(t, st, names[i+1], 1)
		}
		// The last closes the ring: refused at once.
		_, err := owners[n-1].Acquire(ctx, names[0], dlm.WithWait(time.Hour))
		if !errors.Is(err, dlm.ErrDeadlock) {
			t.Fatalf("%d owners: the request closing the ring = %v, want ErrDeadlock", n, err)
		}
		// Releasing the last owner's lock lets the others through.
		for i := n - 1; i >= 0; i-- {
			if err := leases[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i, w := range waits {
			if err := <-w; err != nil {
				t.Fatalf("%d owners: owner %d's wait ended with %v", n, i, err)
			}
		}
	}
}

func TestOwnerIsNotReentrant(t *testing.T) {
	c, _ := memoryClient(t)
	ctx := context.Background()
	o := c.Owner()
	l, err := o.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := o.Acquire(ctx, "x", dlm.WithWait(time.Hour)); !errors.Is(err, dlm.ErrDeadlock) {
		t.Fatalf("an owner asking again for its own EX lock: %v, want ErrDeadlock", err)
	}
	r, err := o.Acquire(ctx, "shared", dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	r2, err := o.Acquire(ctx, "shared", dlm.WithMode(dlm.PR), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("a compatible second lock of one owner: %v", err)
	}
	_ = r2.Release(ctx)
}

func TestWithoutOwnersTheRingWaitsOut(t *testing.T) {
	c, st := memoryClient(t)
	ctx := context.Background()
	x, err := c.Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.Acquire(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	wait := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "y", dlm.WithWait(50*time.Millisecond))
		wait <- err
	}()
	waitQueued(t, st, "y", 1)
	// The same ring as above, but every acquisition is an owner of its
	// own: no cycle forms, so both wait until their wait ends.
	if _, err := c.Acquire(ctx, "x", dlm.WithWait(50*time.Millisecond)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("without owners: %v, want ErrNotAcquired", err)
	}
	if err := <-wait; !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("without owners: %v, want ErrNotAcquired", err)
	}
	_ = x.Release(ctx)
	_ = y.Release(ctx)
}

func TestLeaseBlockingFiresWhenAConflictingRequestQueues(t *testing.T) {
	c, st := memoryClient(t)
	ctx := context.Background()
	r, err := c.Acquire(ctx, "doc", dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ctx, "doc", dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	_ = r2.Release(ctx)
	select {
	case <-r.Blocking():
		t.Fatal("a compatible request fired Blocking")
	default:
	}
	got := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "doc", dlm.WithMode(dlm.EX))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	waitQueued(t, st, "doc", 1)
	select {
	case <-r.Blocking():
	case <-time.After(30 * time.Second):
		t.Fatal("Blocking did not fire with an EX request queued behind a PR holder")
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// OwnerRing checks deadlock detection across dlm.Owners on a store that
// declares driver.FeatureDeadlocks: n owners (n ≥ 2) each hold a lock and
// wait for the next one's, and the request that would close the ring fails
// at once with ErrDeadlock; when the refused owner releases, the others get
// their locks in turn. waiting reports how many requests wait for a
// resource.
func OwnerRing(t *testing.T, c *dlm.Client, n int, waiting func(resource string) int) {
	t.Helper()
	ctx := Context(t)
	base := Resource(t)
	names := make([]string, n)
	owners := make([]*dlm.Owner, n)
	leases := make([]*dlm.Lease, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s/%d", base, i)
		owners[i] = c.Owner()
		l, err := owners[i].Acquire(ctx, names[i])
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	got := make([]chan error, n-1)
	for i := range n - 1 {
		got[i] = make(chan error, 1)
		go func() {
			l, err := owners[i].Acquire(ctx, names[i+1], dlm.WithWait(time.Minute))
			if err == nil {
				err = l.Release(ctx)
			}
			got[i] <- err
		}()
		Await(t, 30*time.Second, "owner queued", func() bool { return waiting(names[i+1]) == 1 })
	}
	_, err := owners[n-1].Acquire(ctx, names[0], dlm.WithWait(time.Hour))
	if !errors.Is(err, dlm.ErrDeadlock) {
		t.Fatalf("%d owners in a ring: the request closing it = %v, want ErrDeadlock", n, err)
	}
	for i := n - 1; i >= 0; i-- {
		if err := leases[i].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n - 1 {
		if err := <-got[i]; err != nil {
			t.Fatalf("owner %d: %v", i, err)
		}
	}
}

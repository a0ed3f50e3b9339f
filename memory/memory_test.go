package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/memory"
)

func newClient(t *testing.T) (*dlm.Client, *memory.Store) {
	t.Helper()
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	return dlm.New(s), s
}

func TestMutualExclusion(t *testing.T) {
	c, _ := newClient(t)
	storetest.MutualExclusion(t, []*dlm.Client{c}, 32, 50)
}

func TestSharedReadersExclusiveWriter(t *testing.T) {
	c, s := newClient(t)
	storetest.SharedReadersExclusiveWriter(t, c, s.Waiting, nil, true)
}

func TestConversion(t *testing.T) {
	c, _ := newClient(t)
	ctx := t.Context()
	l, err := c.Acquire(ctx, "r", dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	before := l.Token()
	if err := l.Convert(ctx, dlm.EX); err != nil {
		t.Fatal(err)
	}
	if l.Mode() != dlm.EX || l.Token() <= before {
		t.Fatalf("after up-conversion: mode %s token %d (was %d)", l.Mode(), l.Token(), before)
	}
	if _, err := c.Acquire(ctx, "r", dlm.WithMode(dlm.PR), dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("reader beside EX: %v", err)
	}
	if err := l.Convert(ctx, dlm.PR); err != nil {
		t.Fatal(err)
	}
	r, err := c.Acquire(ctx, "r", dlm.WithMode(dlm.PR), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("reader after down-conversion: %v", err)
	}
	r.Release(ctx)
	l.Release(ctx)
}

func TestConversionDeadlockIsRefused(t *testing.T) {
	c, s := newClient(t)
	storetest.ConversionDeadlock(t, c, s.Waiting)
}

func TestAbandonedConversionKeepsTheOldMode(t *testing.T) {
	c, s := newClient(t)
	storetest.AbandonedConversionKeepsTheOldMode(t, c, s.Waiting)
}

func TestSemaphore(t *testing.T) {
	c, _ := newClient(t)
	storetest.Semaphore(t, c)
}

func TestExpiryGrantsTheNextWaiter(t *testing.T) {
	c, _ := newClient(t)
	ctx := t.Context()
	// A holder that never renews: its permits die with its TTL.
	a, err := c.Acquire(ctx, "r", dlm.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, err := c.Acquire(ctx, "r", dlm.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The expiry hands the lock over: the bound tells that from a waiter
	// left to its whole wait, with room for a loaded machine.
	d := time.Since(start)
	t.Logf("granted %s after the request, the holder's TTL 50ms", d)
	if d > 10*time.Second {
		t.Fatalf("granted %s after the holder's expiry was due", d)
	}
	<-a.Lost()
	if err := a.Release(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("stale release = %v, want ErrLost", err)
	}
	if err := b.Extend(ctx); err != nil {
		t.Fatalf("new holder lost its lock to a stale release: %v", err)
	}
}

func TestFIFO(t *testing.T) {
	c, s := newClient(t)
	storetest.FIFOHandoff(t, c, 10, s.Waiting)
}

func TestWaitTimeoutAndCancel(t *testing.T) {
	c, s := newClient(t)
	left := func(name string) {
		if n := s.Waiting(name); n != 0 {
			t.Fatalf("%d waiters left after giving up", n)
		}
	}
	storetest.WaitTimeoutIsContention(t, c, 30*time.Millisecond, 1, left)
	storetest.ContextCancelWhileWaiting(t, c, s.Waiting, left)
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	c, s := newClient(t)
	ctx := t.Context()
	l, _ := c.Acquire(ctx, "r")
	s.Close()
	if _, err := c.Acquire(ctx, "r", dlm.WithWait(0)); !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("acquire after Close: %v", err)
	}
	if err := l.Extend(ctx); !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("extend after Close: %v", err)
	}
}

func TestLongestNameIsAccepted(t *testing.T) {
	c, _ := newClient(t)
	storetest.LongestNameAccepted(t, c)
}

func TestElection(t *testing.T) {
	c, _ := newClient(t)
	storetest.Election(t, c, true)
}

func TestLeaseBlocking(t *testing.T) {
	c, _ := newClient(t)
	storetest.Blocking(t, c, true)
}

func TestCancellation(t *testing.T) {
	c, s := newClient(t)
	storetest.Cancellation(t, c, dlm.New(s), storetest.Cancels{Convert: true, Semaphores: true, Elections: true})
}

package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// ConversionDeadlock has two readers (PR) of a fresh resource both convert
// to EX, for stores that convert locks. The first conversion queues
// (waiting(resource), which counts queued requests and conversions, is
// 1); the second would wait for it forever and must fail at once with
// ErrDeadlock, its lease still PR. When the second reader leaves, the
// first conversion succeeds.
func ConversionDeadlock(t *testing.T, c *dlm.Client, waiting func(resource string) int) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	a, b := twoReaders(t, ctx, c, name)
	first := make(chan error, 1)
	go func() { first <- a.Convert(ctx, dlm.EX) }()
	Await(t, 10*time.Second, "first conversion queued", func() bool { return waiting(name) == 1 })
	if err := b.Convert(ctx, dlm.EX); !errors.Is(err, dlm.ErrDeadlock) {
		t.Fatalf("second PR->EX = %v, want ErrDeadlock", err)
	}
	if b.Mode() != dlm.PR {
		t.Fatalf("refused conversion changed the mode to %s", b.Mode())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first conversion after the other reader left: %v", err)
	}
	if a.Mode() != dlm.EX {
		t.Fatalf("mode after the conversion = %s, want EX", a.Mode())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// AbandonedConversionKeepsTheOldMode has one of two readers (PR) of a
// fresh resource convert to EX with a context that ends after 100 ms: the
// conversion fails with ErrNotAcquired joined with DeadlineExceeded, is
// withdrawn from the store (waiting(resource) is 0), and the lease stays
// PR; releasing both readers frees the resource.
func AbandonedConversionKeepsTheOldMode(t *testing.T, c *dlm.Client, waiting func(resource string) int) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	a, b := twoReaders(t, ctx, c, name)
	wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := a.Convert(wait, dlm.EX); !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PR->EX behind another reader = %v, want ErrNotAcquired joined with DeadlineExceeded", err)
	}
	Await(t, 10*time.Second, "conversion withdrawn", func() bool { return waiting(name) == 0 })
	if a.Mode() != dlm.PR {
		t.Fatalf("mode %v after a given-up conversion", a.Mode())
	}
	for _, l := range []*dlm.Lease{a, b} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	Free(t, c, name, "both readers released")
}

// twoReaders takes name twice in PR mode.
func twoReaders(t *testing.T, ctx context.Context, c *dlm.Client, name string) (a, b *dlm.Lease) {
	t.Helper()
	a, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	b, err = c.Acquire(ctx, name, dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

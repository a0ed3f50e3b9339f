package storetest

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm"
)

// Semaphore takes the 3 permits of a fresh semaphore one at a time, for
// stores that offer semaphores: a fourth is refused with ErrNotAcquired;
// a request with another capacity, or for more permits than the capacity,
// fails with ErrInvalid; after a release a permit is free again (a
// try-lock), and converting a semaphore lease fails with ErrUnsupported.
func Semaphore(t *testing.T, c *dlm.Client) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	var held []*dlm.Lease
	for range 3 {
		l, err := c.Acquire(ctx, name, dlm.WithSemaphore(3, 1), dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if _, err := c.Acquire(ctx, name, dlm.WithSemaphore(3, 1), dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("fourth permit of three: %v, want ErrNotAcquired", err)
	}
	if _, err := c.Acquire(ctx, name, dlm.WithSemaphore(5, 1), dlm.WithWait(0)); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("another capacity: %v, want ErrInvalid", err)
	}
	if _, err := c.Acquire(ctx, name, dlm.WithSemaphore(3, 4)); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("more permits than capacity: %v, want ErrInvalid", err)
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, name, dlm.WithSemaphore(3, 1), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("permit after a release: %v", err)
	}
	if err := l.Convert(ctx, dlm.EX); !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("Convert on a semaphore: %v, want ErrUnsupported", err)
	}
	for _, h := range append(held[1:], l) {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

package memory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/memory"
)

// Do takes the lock, runs the function while it holds it, and lets it go.
// The memory store locks within one process: for tests, and for programs
// whose instances never run side by side.
func Example() {
	store := memory.New()
	defer store.Close()
	locks := dlm.New(store)
	ctx := context.Background()

	err := locks.Do(ctx, "reports/nightly", func(ctx context.Context, l *dlm.Lease) error {
		// ctx ends if the lock is lost; hand the fencing token to what
		// you write to, so that it can refuse a stale holder.
		fmt.Println("holding reports/nightly with token", l.Token())
		_, err := locks.Acquire(ctx, "reports/nightly", dlm.WithWait(0))
		fmt.Println("a second try-lock is refused:", errors.Is(err, dlm.ErrNotAcquired))
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding reports/nightly with token 1
	// a second try-lock is refused: true
}

// Acquire returns a lease to release when done; every grant's token is
// above the one before it.
func Example_acquire() {
	store := memory.New()
	defer store.Close()
	locks := dlm.New(store)
	ctx := context.Background()

	for range 2 {
		l, err := locks.Acquire(ctx, "orders/42", dlm.WithTTL(10*time.Second), dlm.WithWait(5*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("token", l.Token())
		if err := l.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// token 1
	// token 2
}

package dlmserver_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/storeurl"
)

// The dlm server (`dlm server`): one session per store, whose keepalives
// hold every lock taken through it.
func Example() {
	ctx := context.Background()
	store, err := dlmserver.Dial(ctx, "127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)
	locks := dlm.New(store)

	err = locks.Do(ctx, "reports/nightly", func(ctx context.Context, l *dlm.Lease) error {
		// ctx ends if the lock is lost; hand the fencing token to what
		// you write to, so that it can refuse a stale holder.
		fmt.Println("holding reports/nightly with token", l.Token())
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// The same through a store URL, as the README's first program does it:
// storeurl opens the store and returns a ready client.
func Example_storeURL() {
	ctx := context.Background()
	locks, store, err := storeurl.NewClient(ctx, "dlm://127.0.0.1:7420")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)

	l, err := locks.Acquire(ctx, "reports/nightly", dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding reports/nightly with token", l.Token())
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// Command first takes a lock, does its work while it holds it, and lets
// it go: run two at once and one waits for the other.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/storeurl"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// $DLM_STORE names the store; empty means the dlm server on this
	// machine (dlm://127.0.0.1:7420).
	locks, store, err := storeurl.NewClient(ctx, os.Getenv("DLM_STORE"))
	if err != nil {
		return err
	}
	defer store.Close(ctx)

	return locks.Do(ctx, "reports/nightly", func(ctx context.Context, l *dlm.Lease) error {
		// ctx ends if the lock is lost; hand the fencing token to what
		// you write to, so that it can refuse a stale holder.
		fmt.Println("holding reports/nightly with token", l.Token())
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
}

package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/redis"
)

// Do holds the lock while the function runs, renews it, and cancels the
// function's context if the lock is lost.
func ExampleClient_Do() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlm.New(redis.New(rdb))

	err := locks.Do(context.Background(), "invoice/42", func(ctx context.Context, l *dlm.Lease) error {
		// Hand the fencing token to the resource you write to, so that it
		// can refuse a stale holder.
		fmt.Println("charging with token", l.Token())
		return ctx.Err()
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(5*time.Second))
	switch {
	case errors.Is(err, dlm.ErrNotAcquired):
		log.Print("someone else is charging invoice 42")
	case errors.Is(err, dlm.ErrUnavailable):
		log.Print("the lock store is down")
	case err != nil:
		log.Print(err)
	}
}

// A try-lock: one attempt, for work that only one instance should do.
func ExampleClient_Acquire_tryOnce() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlm.New(redis.New(rdb))
	ctx := context.Background()

	l, err := locks.Acquire(ctx, "cron/nightly-report", dlm.WithWait(0), dlm.WithAutoRenew(true))
	if errors.Is(err, dlm.ErrNotAcquired) {
		return // another instance runs it
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	select {
	case <-l.Lost():
		log.Print("lost the lock: ", l.Err())
	case <-time.After(time.Minute): // the work
	}
}

// Waiting for a lock someone holds may take as long as it takes; waiting
// for a store that does not answer is bounded: here by 5 s for every call
// of the client, and by 1 s for one call. The client logs one warning when
// the store becomes unreachable.
func ExampleWithUnavailableTimeout() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlm.New(redis.New(rdb),
		dlm.WithLogger(slog.Default()),
		dlm.WithDefaults(dlm.WithUnavailableTimeout(5*time.Second)))
	ctx := context.Background()

	l, err := locks.Acquire(ctx, "cron/nightly-report", dlm.WithUnavailableTimeout(time.Second))
	if errors.Is(err, dlm.ErrUnavailable) {
		// "dlm: lock store unavailable: the redis store was unreachable
		// for 1s: redis acquire: dial tcp 127.0.0.1:6379: connect:
		// connection refused"
		log.Fatal(err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
}

package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/redis"
)

// One Redis server: a lock is a key with a TTL, and waiters queue in a list
// that the release hands the lock to, first come first served.
func Example() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	store := redis.New(rdb)
	defer store.Close()
	locks := dlm.New(store)

	err := locks.Do(context.Background(), "reports/nightly", func(ctx context.Context, l *dlm.Lease) error {
		// ctx ends if the lock is lost; hand the fencing token to what
		// you write to, so that it can refuse a stale holder.
		fmt.Println("holding reports/nightly with token", l.Token())
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

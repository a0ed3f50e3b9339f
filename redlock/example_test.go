package redlock_test

import (
	"context"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/redlock"
)

func Example() {
	var clients []goredis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379", "redis-d:6379", "redis-e:6379"} {
		clients = append(clients, goredis.NewClient(&goredis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true, // required: per-node timeouts
			MaxRetries:            -1,   // dlm retries whole attempts
			DialerRetries:         1,
		}))
	}
	c := dlm.New(redlock.New(clients, redlock.WithRestartGuard(time.Minute)))
	err := c.Do(context.Background(), "orders/42", func(ctx context.Context, l *dlm.Lease) error {
		log.Printf("holding orders/42 with token %d until %s", l.Token(), l.Deadline())
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(5*time.Second))
	if err != nil {
		log.Print(err)
	}
}

package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redis"
)

// env is one test's Redis server and the clients over it.
type env struct {
	t   testing.TB
	srv *testenv.Redis
	rdb *goredis.Client // a raw client for inspecting keys
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 8})
	t.Cleanup(func() { rdb.Close() })
	return &env{t: t, srv: srv, rdb: rdb}
}

// client returns a dlm client over its own go-redis client and store.
func (e *env) client(storeOpts ...redis.Option) (*dlm.Client, *redis.Store) {
	e.t.Helper()
	rdb := goredis.NewClient(&goredis.Options{
		Addr: e.srv.Addr(), PoolSize: 64,
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
	})
	s := redis.New(rdb, storeOpts...)
	e.t.Cleanup(func() {
		s.Close()
		rdb.Close()
	})
	return dlm.New(s), s
}

// waiting returns how many requests wait in resource's queue.
func (e *env) waiting(resource string) int {
	e.t.Helper()
	return int(e.rdb.LLen(context.Background(), "dlm:{"+resource+"}:queue").Val())
}

package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
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

var resourceSeq atomic.Int64

// resource returns a name unique to this test run.
func resource(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), resourceSeq.Add(1))
}

// within fails the test if ch is not closed within d.
func within(t testing.TB, ch <-chan struct{}, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
		return 0
	}
}

// await polls cond every few milliseconds until it holds or d passes. It is
// used only for state inside Redis, which offers no event to wait on.
func await(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

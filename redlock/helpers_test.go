package redlock_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redlock"
)

// nodes is the number of Redis masters in each test.
const nodes = 5

// env is one test's Redis masters and raw clients over them for inspecting
// and disturbing them.
type env struct {
	t    testing.TB
	srvs []*testenv.Redis
	raw  []*goredis.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t}
	for range nodes {
		srv := testenv.StartRedis(t)
		rdb := goredis.NewClient(&goredis.Options{
			Addr: srv.Addr(), PoolSize: 4, MaxRetries: -1, DialerRetries: 1,
		})
		t.Cleanup(func() { rdb.Close() })
		e.srvs = append(e.srvs, srv)
		e.raw = append(e.raw, rdb)
	}
	return e
}

// clients returns a fresh go-redis client per node, configured as the
// package documentation advises.
func (e *env) clients() []goredis.UniversalClient {
	e.t.Helper()
	cs := make([]goredis.UniversalClient, len(e.srvs))
	for i, srv := range e.srvs {
		rdb := goredis.NewClient(&goredis.Options{
			Addr: srv.Addr(), PoolSize: 64,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		})
		e.t.Cleanup(func() { rdb.Close() })
		cs[i] = rdb
	}
	return cs
}

// store returns a store over fresh clients. Its node timeout is a generous
// 5 s unless opts set another: the tests run with -race on shared machines,
// where the default (50 ms for TTLs of 500 ms and more) is missed now and
// then, and only the tests about timeouts want them.
func (e *env) store(opts ...redlock.Option) *redlock.Store {
	return redlock.New(e.clients(), append([]redlock.Option{redlock.WithNodeTimeout(5 * time.Second)}, opts...)...)
}

// client returns a dlm client over its own store and go-redis clients.
func (e *env) client(opts ...redlock.Option) (*dlm.Client, *redlock.Store) {
	s := e.store(opts...)
	return dlm.New(s), s
}

// lockKey is the key of resource's lock under the default prefix.
func lockKey(resource string) string { return "dlm:{" + resource + "}" }

// holders returns the value of resource's lock key on each node ("" when
// absent or the node is down), or on the nodes given.
func (e *env) holders(resource string, only ...int) map[int]string {
	e.t.Helper()
	if only == nil {
		for i := range e.raw {
			only = append(only, i)
		}
	}
	vals := make(map[int]string, len(only))
	for _, i := range only {
		vals[i], _ = e.raw[i].Get(context.Background(), lockKey(resource)).Result()
	}
	return vals
}

// count returns how many nodes hold resource's lock for value v ("" counts
// the nodes without the lock).
func (e *env) count(resource, v string) int {
	n := 0
	for _, h := range e.holders(resource) {
		if h == v {
			n++
		}
	}
	return n
}

// pause stops node i from answering for d (CLIENT PAUSE ALL).
func (e *env) pause(i int, d time.Duration) {
	e.t.Helper()
	if err := e.raw[i].Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		e.t.Fatalf("pause node %d: %v", i, err)
	}
}

// ours counts the goroutines running the store's code.
func ours() int { return storetest.Goroutines("github.com/dlmhq/dlm/redlock.") }

// awaitEveryNode waits until every node holds resource's lock for one
// owner: a grant returns with a quorum, the other nodes' answers may still
// be on their way.
func (e *env) awaitEveryNode(resource string) {
	e.t.Helper()
	storetest.Await(e.t, 10*time.Second, "lock granted on every node", func() bool {
		v := e.holders(resource)[0]
		return v != "" && e.count(resource, v) == nodes
	})
}

// goredisKeepTTL sets a key and keeps its TTL.
var goredisKeepTTL = goredis.SetArgs{KeepTTL: true}

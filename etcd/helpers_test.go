package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// shared is the etcd server of the tests that do not stop it.
var shared *testenv.Etcd

func TestMain(m *testing.M) { storetest.Main(m, &shared, testenv.NewEtcd) }

// env is one test's etcd server and the clients over it.
type env struct {
	t   testing.TB
	srv *testenv.Etcd
	raw *clientv3.Client // a client for inspecting and breaking keys
}

// newEnv returns an env over the shared server.
func newEnv(t testing.TB) *env { return envOn(t, shared) }

// ownEnv returns an env over a server of the test's own, for tests that
// kill it.
func ownEnv(t testing.TB) *env { return envOn(t, testenv.StartEtcd(t)) }

func envOn(t testing.TB, srv *testenv.Etcd) *env {
	t.Helper()
	return &env{t: t, srv: srv, raw: newClient(t, srv)}
}

func newClient(t testing.TB, srv *testenv.Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// etcdTimeout is the request timeout of stores over a server that a test
// kills.
var etcdTimeout = etcd.WithRequestTimeout(300 * time.Millisecond)

// client returns a dlm client over its own etcd client and store.
func (e *env) client(storeOpts ...etcd.Option) (*dlm.Client, *etcd.Store) {
	e.t.Helper()
	s := etcd.New(newClient(e.t, e.srv), storeOpts...)
	e.t.Cleanup(func() { // before the client closes
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return dlm.New(s), s
}

// keys returns the keys of resource's queue, in create revision order.
func (e *env) keys(resource string) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.raw.Get(ctx, etcd.DefaultPrefix+escaper.Replace(resource)+"/",
		clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		e.t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// waiting returns how many requests wait for resource behind its one
// holder.
func (e *env) waiting(resource string) int { return len(e.keys(resource)) - 1 }

// onlyHolder fails the test unless resource has just its holder's key: no
// waiter that gave up is left behind.
func (e *env) onlyHolder(resource string) {
	e.t.Helper()
	if keys := e.keys(resource); len(keys) != 1 {
		e.t.Fatalf("keys = %q, want the holder's only", keys)
	}
}

// leaseOf returns the etcd lease of the key of the grant with token.
func (e *env) leaseOf(token uint64) clientv3.LeaseID {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.raw.Get(ctx, etcd.DefaultPrefix, clientv3.WithPrefix(),
		clientv3.WithMinCreateRev(int64(token)), clientv3.WithMaxCreateRev(int64(token)))
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("the key of token %d: %v", token, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// revoke revokes the etcd lease of l, as an operator would.
func (e *env) revoke(l *dlm.Lease) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.raw.Revoke(ctx, e.leaseOf(l.Token())); err != nil {
		e.t.Fatal(err)
	}
}

// escaper escapes a resource name as the store does in its keys.
var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

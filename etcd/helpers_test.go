package etcd_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/testenv"
)

// shared is the etcd server of the tests that do not stop it.
var shared *testenv.Etcd

func TestMain(m *testing.M) {
	srv, err := testenv.NewEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

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

// leaseOf returns the etcd lease of l's key.
func (e *env) leaseOf(l *dlm.Lease) clientv3.LeaseID {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.raw.Get(ctx, etcd.DefaultPrefix, clientv3.WithPrefix(),
		clientv3.WithMinCreateRev(int64(l.Token())), clientv3.WithMaxCreateRev(int64(l.Token())))
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("the key of token %d: %v", l.Token(), err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// revoke revokes the etcd lease of l, as an operator would.
func (e *env) revoke(l *dlm.Lease) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.raw.Revoke(ctx, e.leaseOf(l)); err != nil {
		e.t.Fatal(err)
	}
}

// escaper escapes a resource name as the store does in its keys.
var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

var resourceSeq atomic.Int64

// resource returns a name unique to this test run, with a '/' in it.
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
// used only for state inside etcd that the test has no event for.
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

// goroutines counts the goroutines of package dlm, of this store, and of
// etcd's watch streams (which end when their last watch is cancelled).
func goroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	count := 0
	for _, s := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(s, "github.com/dlmhq/dlm.") && !strings.Contains(s, "_test.") ||
			strings.Contains(s, "github.com/dlmhq/dlm/etcd.") && !strings.Contains(s, "etcd_test.") ||
			strings.Contains(s, "watchGRPCStream") {
			count++
		}
	}
	return count
}

package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
)

// A store over a client whose KV is its own sends the calls of a cycle
// straight to etcd's KV service; a client whose KV, Watcher and Lease the
// user put in a namespace gets every call, and the locks live inside the
// namespace with the same guarantees.
func TestNamespacedClient(t *testing.T) {
	e := newEnv(t)
	if _, s := e.client(); !etcd.Direct(s) {
		t.Error("a store over clientv3.New's client does not send its cycle directly")
	}
	const ns = "tenant-a/"
	nsClient := func() (*dlm.Client, *etcd.Store) {
		cli := newClient(t, e.srv)
		cli.KV = namespace.NewKV(cli.KV, ns)
		cli.Watcher = namespace.NewWatcher(cli.Watcher, ns)
		cli.Lease = namespace.NewLease(cli.Lease, ns)
		s := etcd.New(cli)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		})
		if etcd.Direct(s) {
			t.Fatal("a store over a namespaced client bypasses the namespace")
		}
		return dlm.New(s), s
	}
	c1, _ := nsClient()
	c2, _ := nsClient()
	ctx := storetest.Context(t)
	keys := func(name string) []string {
		t.Helper()
		resp, err := e.raw.Get(ctx, ns+etcd.DefaultPrefix+escaper.Replace(name)+"/",
			clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			out[i] = string(kv.Key)
		}
		return out
	}

	t.Run("keys inside the namespace", func(t *testing.T) {
		name := storetest.Resource(t)
		l, err := c1.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(name); len(got) != 1 {
			t.Errorf("keys in the namespace = %q, want the holder's", got)
		}
		if got := e.keys(name); len(got) != 0 {
			t.Errorf("keys outside the namespace = %q, want none", got)
		}
		if _, err := c2.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Errorf("a second client's try = %v, want ErrNotAcquired", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := keys(name); len(got) != 0 {
			t.Errorf("keys after the release = %q", got)
		}
	})
	t.Run("mutual exclusion", func(t *testing.T) {
		name := storetest.MutualExclusion(t, []*dlm.Client{c1, c2}, 8, 5, dlm.WithTTL(5*time.Second))
		if got := keys(name); len(got) != 0 {
			t.Errorf("keys left behind: %q", got)
		}
	})
	t.Run("FIFO", func(t *testing.T) {
		storetest.FIFOHandoff(t, c1, 4, func(name string) int { return len(keys(name)) - 1 })
	})
	t.Run("a key created again is not the grant's", func(t *testing.T) {
		name := storetest.Resource(t)
		l, err := c1.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		k := keys(name)
		if len(k) != 1 {
			t.Fatalf("keys = %q", k)
		}
		if _, err := e.raw.Delete(ctx, k[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := e.raw.Put(ctx, k[0], "EX\n"); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); !errors.Is(err, dlm.ErrNotHeld) {
			t.Fatalf("Release = %v, want ErrNotHeld", err)
		}
		if got := keys(name); len(got) != 0 {
			t.Errorf("keys after the release = %q", got)
		}
	})
}

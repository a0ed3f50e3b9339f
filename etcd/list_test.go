package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// dir returns a key prefix of the test's own, whose keys are deleted when
// the test ends.
func (e *env) dir() string {
	dir := "list-" + storetest.Resource(e.t) + "/"
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.raw.Delete(ctx, dir, clientv3.WithPrefix()); err != nil {
			e.t.Error(err)
		}
	})
	return dir
}

func TestListHolderAndWaitersInOrder(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	storetest.ListQueue(t, storetest.ListedQueue{
		Holder: c, Lister: s, Resource: storetest.Resource(t) + "/with%/slash",
		OwnerIDs: true, Tokens: true, MaxTTL: storetest.ListTTL,
		Metadata: "host-b\nline 2", WaiterMetadata: true,
	})
}

func TestListModes(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	reader, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	writer := make(chan *dlm.Lease, 1)
	go func() {
		l, _ := c.Acquire(wctx, name) // ends with the test
		writer <- l
	}()
	storetest.Await(t, 10*time.Second, "writer queued", func() bool {
		r, _ := storetest.Listed(t, s, name)
		return len(r.Waiters) == 1
	})
	// NL conflicts with nothing: granted behind the queued writer.
	null, err := c.Acquire(ctx, name, dlm.WithMode(dlm.NL), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer null.Release(ctx)
	r, _ := storetest.Listed(t, s, name)
	if len(r.Holders) != 2 || r.Holders[0].Mode != driver.PR || r.Holders[0].Token != reader.Token() ||
		r.Holders[1].Mode != driver.NL || r.Holders[1].Token != null.Token() ||
		len(r.Waiters) != 1 || r.Waiters[0].Mode != driver.EX {
		t.Fatalf("listing = %+v, want holders PR and NL and an EX waiter", r)
	}
	cancel()
	if l := <-writer; l != nil {
		t.Fatal("the writer was granted beside a reader")
	}
}

func TestListPrefixEscapingAndLimit(t *testing.T) {
	e := newEnv(t)
	dir := e.dir()
	c, s := e.client(etcd.WithPrefix(dir))
	// Keys of other shapes under the prefix are not requests.
	for _, k := range []string{"foreign", "/y"} {
		if _, err := e.raw.Put(storetest.Context(t), dir+k, "EX\n"); err != nil {
			t.Fatal(err)
		}
	}
	storetest.ListPrefixAndLimit(t, c, s, []string{"a", "a/b", "a/c", "a%2F", "a%", "ab", "b"}, []storetest.ListQuery{
		{Prefix: "", Limit: 100},
		{Prefix: "", Limit: 3},
		{Prefix: "a/", Limit: 100},
		{Prefix: "a/", Limit: 1},
		{Prefix: "a%", Limit: 100},
		{Prefix: "a%2", Limit: 100},
		{Prefix: "c", Limit: 100},
	})
}

func TestListPages(t *testing.T) {
	e := newEnv(t)
	dir := e.dir()
	_, s := e.client(etcd.WithPrefix(dir))
	ctx := storetest.Context(t)
	// More keys than one page, written without leases: they show with no
	// TTL.
	const n = 2500
	for i := 0; i < n; i += 100 {
		var ops []clientv3.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sr%04d/holder", dir, j), "PW\n"))
		}
		if _, err := e.raw.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// A waiter behind the first holder, created later.
	if _, err := e.raw.Put(ctx, dir+"r0000/waiter", "PR\nw"); err != nil {
		t.Fatal(err)
	}
	got := storetest.List(t, s, "", 5000)
	if len(got) != n || !slices.IsSorted(storetest.Names(got)) {
		t.Fatalf("listed %d resources, want %d in order", len(got), n)
	}
	// Tokens are create revisions, unknown here: the waiter's is later.
	r := got[0]
	want := driver.ResourceInfo{
		Resource: "r0000",
		Holders:  []driver.HolderInfo{{Owner: "holder", Mode: driver.PW}},
		Waiters:  []driver.WaiterInfo{{Owner: "waiter", Mode: driver.PR, Metadata: "w"}},
	}
	if len(r.Holders) == 1 && r.Holders[0].Token > 0 {
		want.Holders[0].Token = r.Holders[0].Token
	}
	if r.Resource != want.Resource || want.Holders[0].Token == 0 || !slices.Equal(r.Holders, want.Holders) || !slices.Equal(r.Waiters, want.Waiters) {
		t.Fatalf("first resource = %+v, want %+v", r, want)
	}
	if got := storetest.Names(storetest.List(t, s, "", 7)); !slices.Equal(got, []string{"r0000", "r0001", "r0002", "r0003", "r0004", "r0005", "r0006"}) {
		t.Fatalf("List limit 7 = %q", got)
	}
	if got := storetest.Names(storetest.List(t, s, "r24", 1000)); len(got) != 100 || got[0] != "r2400" || got[99] != "r2499" {
		t.Fatalf("List(%q) = %d names from %q, want r2400 to r2499", "r24", len(got), got[0])
	}
}

func TestListErrors(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	storetest.ListErrors(t, s, func() driver.Lister {
		// No server at the endpoint.
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))},
			DialTimeout: time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return etcd.New(cli, etcdTimeout)
	})
	if _, err := etcd.New(nil).List(context.Background(), "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("nil client: %v, want ErrInvalid", err)
	}
}

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
	ctx := storetest.Context(t)
	name := storetest.Resource(t) + "/with%/slash"
	const ttl = 10 * time.Second

	holder, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithMetadata("host-b\nline 2"))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := storetest.Listed(t, s, name)
	if !ok || len(r.Holders) != 1 || len(r.Waiters) != 0 {
		t.Fatalf("listing = %+v (listed %v), want one holder and no waiter", r, ok)
	}
	h := r.Holders[0]
	if !storetest.OwnerID.MatchString(h.Owner) || h.Mode != driver.EX || h.Token != holder.Token() ||
		h.Metadata != "host-b\nline 2" || h.TTL <= 0 || h.TTL > ttl {
		t.Fatalf("holder = %+v, want a 32-hex owner, EX, token %d, metadata %q, TTL in (0, %s]",
			h, holder.Token(), "host-b\nline 2", ttl)
	}

	const waiters = 3
	leases := make(chan *dlm.Lease, waiters)
	var order []string
	for i := range waiters {
		go func() {
			l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(time.Minute), dlm.WithMetadata(fmt.Sprint("waiter ", i)))
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
		storetest.Await(t, 10*time.Second, "waiter queued", func() bool {
			r, _ = storetest.Listed(t, s, name)
			return len(r.Waiters) == i+1
		})
		w := r.Waiters[i]
		if !storetest.OwnerID.MatchString(w.Owner) || w.Mode != driver.EX || w.Metadata != fmt.Sprint("waiter ", i) ||
			w.Owner == h.Owner || slices.Contains(order, w.Owner) {
			t.Fatalf("new waiter = %+v, earlier ones %q", w, order)
		}
		if got := storetest.WaiterOwners(r); !slices.Equal(got[:i], order) {
			t.Fatalf("waiters = %q, want %q first", got, order)
		}
		order = append(order, w.Owner)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-leases
	r, _ = storetest.Listed(t, s, name)
	if got := storetest.HolderOwners(r); !slices.Equal(got, order[:1]) || r.Holders[0].Token != next.Token() {
		t.Fatalf("after the release: %+v, want holder %s with token %d", r, order[0], next.Token())
	}
	if got := storetest.WaiterOwners(r); !slices.Equal(got, order[1:]) {
		t.Fatalf("waiters after the handoff = %q, want %q", got, order[1:])
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters - 1 {
		if err := (<-leases).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := storetest.Listed(t, s, name); ok {
		t.Fatalf("released resource still listed: %+v", r)
	}
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
	ctx := storetest.Context(t)
	all := []string{"a", "a/b", "a/c", "a%2F", "a%", "ab", "b"}
	for _, name := range all {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
	}
	// Keys of other shapes under the prefix are not requests.
	for _, k := range []string{"foreign", "/y"} {
		if _, err := e.raw.Put(ctx, dir+k, "EX\n"); err != nil {
			t.Fatal(err)
		}
	}
	sorted := slices.Sorted(slices.Values(all))
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"", 100, sorted},
		{"", 3, sorted[:3]},
		{"a/", 100, []string{"a/b", "a/c"}},
		{"a/", 1, []string{"a/b"}},
		{"a%", 100, []string{"a%", "a%2F"}},
		{"a%2", 100, []string{"a%2F"}},
		{"c", 100, nil},
	} {
		if got := storetest.Names(storetest.List(t, s, tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
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
	if _, err := s.List(context.Background(), "", 0); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("limit 0: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.List(ctx, "", 10); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("cancelled context: %v, want context.Canceled only", err)
	}
	// No server at the endpoint.
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := etcd.New(cli, etcdTimeout).List(context.Background(), "", 10); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("no server: %v, want ErrUnavailable", err)
	}
	if _, err := etcd.New(nil).List(context.Background(), "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("nil client: %v, want ErrInvalid", err)
	}
}

package redis_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redis"
)

func TestListHolderAndWaitersInOrder(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 10 * time.Second

	holder, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithMetadata("host-a pid 1"))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := storetest.Listed(t, s, name)
	if !ok || len(r.Holders) != 1 || len(r.Waiters) != 0 {
		t.Fatalf("listing = %+v (listed %v), want one holder and no waiter", r, ok)
	}
	h := r.Holders[0]
	if !storetest.OwnerID.MatchString(h.Owner) || h.Mode != driver.EX || h.Token != holder.Token() ||
		h.Metadata != "host-a pid 1" || h.TTL <= 0 || h.TTL > ttl {
		t.Fatalf("holder = %+v, want a 32-hex owner, EX, token %d, metadata %q, TTL in (0, %s]",
			h, holder.Token(), "host-a pid 1", ttl)
	}

	// Three waiters, queued one after another; each shows up at the end
	// of the queue.
	const waiters = 3
	leases := make(chan *dlm.Lease, waiters)
	var order []string
	for i := range waiters {
		go func() {
			l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(time.Minute))
			if err != nil {
				t.Error(err)
			}
			leases <- l
		}()
		var r driver.ResourceInfo
		storetest.Await(t, 10*time.Second, "waiter queued", func() bool {
			r, _ = storetest.Listed(t, s, name)
			return len(r.Waiters) == i+1
		})
		w := r.Waiters[i]
		if !storetest.OwnerID.MatchString(w.Owner) || w.Mode != driver.EX || w.Owner == h.Owner || slices.Contains(order, w.Owner) {
			t.Fatalf("new waiter = %+v, earlier ones %q, holder %q", w, order, h.Owner)
		}
		if got := storetest.WaiterOwners(r); !slices.Equal(got[:i], order) {
			t.Fatalf("waiters = %q, want %q first", got, order)
		}
		order = append(order, w.Owner)
	}

	// The release hands the lock to the first waiter; the others stay
	// queued in order.
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-leases
	r, ok = storetest.Listed(t, s, name)
	if !ok || len(r.Holders) != 1 || r.Holders[0].Owner != order[0] || r.Holders[0].Token != next.Token() {
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

func TestListPrefixEscapingAndLimit(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	// Glob metacharacters, braces and the escape character of hash tags.
	all := []string{"L*x", "L1/x", "L[1]/a", "L[1]/b", "L[1]/c", `L\/d`, "L%7D/f", "L}/e", "M"}
	for _, name := range all {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Release(context.Background()) })
	}
	sorted := slices.Sorted(slices.Values(all))
	if got := storetest.Names(storetest.List(t, s, "", 100)); !slices.Equal(got, sorted) {
		t.Fatalf("List all = %q, want %q", got, sorted)
	}
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"L[1]/", 100, []string{"L[1]/a", "L[1]/b", "L[1]/c"}},
		{"L[1]/", 2, []string{"L[1]/a", "L[1]/b"}},
		{"L*", 100, []string{"L*x"}},
		{"L}", 100, []string{"L}/e"}},
		{"L%", 100, []string{"L%7D/f"}},
		{`L\`, 100, []string{`L\/d`}},
		{"L", 3, sorted[:3]},
		{"", 1, sorted[:1]},
		{"N", 100, nil},
	} {
		if got := storetest.Names(storetest.List(t, s, tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
}

func TestListWaitersOnlyAndLapsedWaiters(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	// A queue whose holder just left (the handoff is under way), with a
	// live waiter and one that stopped refreshing its place.
	const live, lapsed = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	e.rdb.RPush(ctx, "dlm:{w}:queue", lapsed, live)
	e.rdb.ZAdd(ctx, "dlm:{w}:live", goredisZ(float64(now-1000), lapsed), goredisZ(float64(now+60000), live))
	// A queue of lapsed waiters only.
	e.rdb.RPush(ctx, "dlm:{x}:queue", lapsed)
	e.rdb.ZAdd(ctx, "dlm:{x}:live", goredisZ(float64(now-1000), lapsed))
	// Keys of the layout that are not locks or queues.
	e.rdb.Set(ctx, "dlm:{y}:fence", "42", 0)
	e.rdb.RPush(ctx, "dlm:{z}:wake:"+live, "1")
	e.rdb.Set(ctx, "other{v}", "x", 0)

	got := storetest.List(t, s, "", 100)
	want := []driver.WaiterInfo{{Owner: live, Mode: driver.EX}}
	if len(got) != 1 || got[0].Resource != "w" || len(got[0].Holders) != 0 || !slices.Equal(got[0].Waiters, want) {
		t.Fatalf("List = %+v, want resource w with no holder and the waiters %+v", got, want)
	}
}

func TestListAfterScriptFlush(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	l, err := c.Acquire(ctx, "a", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	storetest.List(t, s, "", 10)
	if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := storetest.List(t, s, "", 10); len(got) != 1 || len(got[0].Holders) != 1 || got[0].Holders[0].Token != l.Token() {
		t.Fatalf("List after SCRIPT FLUSH = %+v", got)
	}
}

func TestListManyResources(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := context.Background()
	// More keys than one SCAN call returns, most of them not locks.
	pipe := e.rdb.Pipeline()
	var want []string
	for i := range 3000 {
		name := string(rune('a'+i%26)) + "/" + time.Duration(i).String()
		if i%3 == 0 {
			pipe.Set(ctx, "dlm:{"+name+"}", "0123456789abcdef0123456789abcdef", time.Minute)
			want = append(want, name)
		}
		pipe.Set(ctx, "dlm:{"+name+"}:fence", "1", time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if got := storetest.Names(storetest.List(t, s, "", 5000)); !slices.Equal(got, want) {
		t.Fatalf("listed %d resources, want %d", len(got), len(want))
	}
	if got := storetest.Names(storetest.List(t, s, "", 50)); !slices.Equal(got, want[:50]) {
		t.Fatalf("List limit 50 = %q, want %q", got, want[:50])
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
	e.srv.Kill()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.List(ctx, "", 10); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("server down: %v, want ErrUnavailable", err)
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: e.srv.Addr()})
	defer rdb.Close()
	bad := redis.New(rdb, redis.WithPrefix("a{"))
	if _, err := bad.List(ctx, "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("bad prefix: %v, want ErrInvalid", err)
	}
}

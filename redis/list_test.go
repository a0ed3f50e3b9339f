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
	storetest.ListQueue(t, storetest.ListedQueue{
		Holder: c, Lister: s,
		OwnerIDs: true, Tokens: true, MaxTTL: storetest.ListTTL, Metadata: "host-a pid 1",
	})
}

func TestListPrefixEscapingAndLimit(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	// Glob metacharacters, braces and the escape character of hash tags.
	all := []string{"L*x", "L1/x", "L[1]/a", "L[1]/b", "L[1]/c", `L\/d`, "L%7D/f", "L}/e", "M"}
	storetest.ListPrefixAndLimit(t, c, s, all, []storetest.ListQuery{
		{Prefix: "", Limit: 100},
		{Prefix: "L[1]/", Limit: 100},
		{Prefix: "L[1]/", Limit: 2},
		{Prefix: "L*", Limit: 100},
		{Prefix: "L}", Limit: 100},
		{Prefix: "L%", Limit: 100},
		{Prefix: `L\`, Limit: 100},
		{Prefix: "L", Limit: 3},
		{Prefix: "", Limit: 1},
		{Prefix: "N", Limit: 100},
	})
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
	storetest.ListErrors(t, s, func() driver.Lister {
		e.srv.Kill()
		return s
	})
	rdb := goredis.NewClient(&goredis.Options{Addr: e.srv.Addr()})
	defer rdb.Close()
	bad := redis.New(rdb, redis.WithPrefix("a{"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bad.List(ctx, "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("bad prefix: %v, want ErrInvalid", err)
	}
}

package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redlock"
)

func TestListHolder(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 10 * time.Second
	l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithMetadata("worker 7"), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returned with a quorum; the other nodes' grants may still be
	// on their way (a loaded machine delays them), and the checks below read
	// every node.
	e.awaitEveryNode(name)
	got := storetest.List(t, s, name, 10)
	if len(got) != 1 || got[0].Resource != name || len(got[0].Holders) != 1 || len(got[0].Waiters) != 0 {
		t.Fatalf("List = %+v, want %q with one holder", got, name)
	}
	h := got[0].Holders[0]
	if !storetest.OwnerID.MatchString(h.Owner) || h.Mode != driver.EX || h.Metadata != "worker 7" || h.TTL <= 0 || h.TTL > ttl {
		t.Fatalf("holder = %+v, want a 32-hex owner, EX, metadata %q, TTL in (0, %s]", h, "worker 7", ttl)
	}
	// The grant's token is the largest counter of the quorum that
	// answered first; the listing shows the largest of every node.
	var counters []uint64
	for i := range e.raw {
		n, err := e.raw[i].Get(ctx, lockKey(name)+":fence").Uint64()
		if err != nil {
			t.Fatal(err)
		}
		counters = append(counters, n)
	}
	if !slices.Contains(counters, l.Token()) || h.Token != slices.Max(counters) {
		t.Fatalf("listed token %d, grant's token %d, the nodes' counters %d", h.Token, l.Token(), counters)
	}
	if v := e.holders(name)[0]; v != h.Owner+"worker 7" {
		t.Fatalf("node 0 holds %q, listed owner %q", v, h.Owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storetest.List(t, s, name, 10); len(got) != 0 {
		t.Fatalf("released lock still listed: %+v", got)
	}
}

func TestListQuorumOnly(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := context.Background()
	const a, b = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	set := func(node int, resource, owner string, ttl time.Duration, token string) {
		t.Helper()
		if err := e.raw[node].Set(ctx, lockKey(resource), owner+"meta", ttl).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.raw[node].Set(ctx, lockKey(resource)+":fence", token, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// "minority": a on 2 nodes, b on 2: nobody has a quorum of 3.
	set(0, "minority", a, time.Minute, "1")
	set(1, "minority", a, time.Minute, "1")
	set(2, "minority", b, time.Minute, "2")
	set(3, "minority", b, time.Minute, "2")
	// "quorum": a on 4 nodes with different TTLs and counters, b on one.
	set(0, "quorum", a, 60*time.Second, "5")
	set(1, "quorum", a, 50*time.Second, "7")
	set(2, "quorum", a, 40*time.Second, "6")
	set(3, "quorum", a, 30*time.Second, "6")
	set(4, "quorum", b, 90*time.Second, "9")

	got := storetest.List(t, s, "", 10)
	if len(got) != 1 || got[0].Resource != "quorum" || len(got[0].Holders) != 1 {
		t.Fatalf("List = %+v, want only %q", got, "quorum")
	}
	// Held on a quorum until the third longest TTL, 40 s, runs out.
	h := got[0].Holders[0]
	if h.Owner != a || h.Token != 7 || h.Metadata != "meta" || h.TTL <= 39*time.Second || h.TTL > 40*time.Second {
		t.Fatalf("holder = %+v, want owner %s, token 7, metadata %q, TTL about 40s", h, a, "meta")
	}
}

func TestListPrefixAndLimit(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	storetest.ListPrefixAndLimit(t, c, s, []string{"a[1]/x", "a[1]/y", "a[1]/z", "a1/x", "a*", "b"}, []storetest.ListQuery{
		{Prefix: "", Limit: 100},
		{Prefix: "", Limit: 2},
		{Prefix: "a[1]/", Limit: 100},
		{Prefix: "a[1]/", Limit: 2},
		{Prefix: "a*", Limit: 100},
		{Prefix: "c", Limit: 100},
	})
}

func TestListNodesDown(t *testing.T) {
	e := newEnv(t)
	c, s := e.client() // the nodes are down, not slow: no short node timeout
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// Acquire returned with a quorum; the other nodes' grants may still be
	// on their way (a loaded machine delays them).
	e.awaitEveryNode(name)
	e.srvs[1].Kill()
	e.srvs[3].Kill()
	owner := e.holders(name, 0)[0][:32]
	if got := storetest.List(t, s, "", 10); len(got) != 1 || len(got[0].Holders) != 1 || got[0].Holders[0].Owner != owner {
		t.Fatalf("List with 2 of 5 nodes down = %+v, want the holder %s", got, owner)
	}
	e.srvs[4].Kill()
	_, err = s.List(ctx, "", 10)
	var ne *redlock.NodeError
	if !errors.Is(err, driver.ErrUnavailable) || !errors.As(err, &ne) {
		t.Fatalf("List with 3 of 5 nodes down: %v, want ErrUnavailable with node errors", err)
	}
}

func TestListNodeTimeout(t *testing.T) {
	e := newEnv(t)
	// The pause outlasts the node timeout by far, however loaded the
	// machine: List must give up on the paused nodes before they answer.
	const timeout, pause = 100 * time.Millisecond, 10 * time.Second
	s := e.store(redlock.WithNodeTimeout(timeout))
	paused := time.Now()
	for _, i := range []int{0, 2, 4} {
		e.pause(i, pause)
	}
	start := time.Now()
	_, err := s.List(context.Background(), "", 10)
	var ne *redlock.NodeError
	if !errors.Is(err, driver.ErrUnavailable) || !errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "no answer within the node timeout") {
		t.Fatalf("List with 3 of 5 nodes paused: %v, want ErrUnavailable with node errors", err)
	}
	t.Logf("List took %s with a node timeout of %s", time.Since(start), timeout)
	if !time.Now().Before(paused.Add(pause)) {
		t.Fatalf("List took %s with a node timeout of %s: it waited for the paused nodes", time.Since(start), timeout)
	}
}

func TestListErrors(t *testing.T) {
	e := newEnv(t)
	// Nodes down are TestListNodesDown's.
	storetest.ListErrors(t, e.store(), nil)
	if _, err := redlock.New(nil).List(context.Background(), "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("no clients: %v, want ErrInvalid", err)
	}
}

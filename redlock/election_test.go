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
	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redlock"
)

// inspect inspects resource through s within 20 s and fails the test on an
// error.
func inspect(t *testing.T, s *redlock.Store, resource string) driver.ResourceInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := s.Inspect(ctx, resource)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", resource, err)
	}
	if r.Resource != resource || len(r.Waiters) != 0 || len(r.Holders) > 1 {
		t.Fatalf("Inspect(%q) = %+v", resource, r)
	}
	return r
}

func TestInspectHolder(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	if r := inspect(t, s, name); len(r.Holders) != 0 {
		t.Fatalf("free resource inspected as %+v", r)
	}
	const ttl = 10 * time.Second
	l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithMetadata("leader A"), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	e.awaitEveryNode(name)
	r := inspect(t, s, name)
	if len(r.Holders) != 1 {
		t.Fatalf("Inspect = %+v, want one holder", r)
	}
	h := r.Holders[0]
	if h.Owner != e.holders(name)[0][:32] || h.Mode != driver.EX || h.Metadata != "leader A" || h.TTL <= 0 || h.TTL > ttl {
		t.Fatalf("holder = %+v, want node 0's owner, EX, metadata %q, TTL in (0, %s]", h, "leader A", ttl)
	}
	// The nodes run on this machine's clock: the grant time lies within
	// the acquisition (1 ms allows for the rounding of the readings).
	if h.Since.Before(l.AcquiredAt().Add(-time.Millisecond)) || h.Since.After(time.Now().Add(time.Millisecond)) {
		t.Fatalf("holder granted at %s, outside the acquisition that began at %s", h.Since, l.AcquiredAt())
	}
	// Inspect and List show the holder alike.
	listed := storetest.List(t, s, name, 10)
	if len(listed) != 1 || len(listed[0].Holders) != 1 {
		t.Fatalf("List = %+v, want one holder", listed)
	}
	if lh := listed[0].Holders[0]; lh.Owner != h.Owner || lh.Token != h.Token || !lh.Since.Equal(h.Since) || lh.Metadata != h.Metadata {
		t.Fatalf("Inspect's holder %+v, List's %+v", h, lh)
	}
	if !slices.Contains(counters(t, e, name), l.Token()) || h.Token != slices.Max(counters(t, e, name)) {
		t.Fatalf("inspected token %d, grant's token %d, the nodes' counters %d", h.Token, l.Token(), counters(t, e, name))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := inspect(t, s, name); len(r.Holders) != 0 {
		t.Fatalf("released lock inspected as %+v", r)
	}
}

// counters returns every node's token counter of resource.
func counters(t *testing.T, e *env, resource string) []uint64 {
	t.Helper()
	var out []uint64
	for i := range e.raw {
		n, err := e.raw[i].Get(context.Background(), lockKey(resource)+":fence").Uint64()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func TestInspectQuorumOnly(t *testing.T) {
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
	for i, owner := range []string{a, a, b, b} {
		set(i, "minority", owner, time.Minute, "1")
	}
	for i, ttl := range []time.Duration{60 * time.Second, 50 * time.Second, 40 * time.Second, 30 * time.Second} {
		set(i, "quorum", a, ttl, []string{"5", "7", "6", "6"}[i])
	}
	set(4, "quorum", b, 90*time.Second, "9")
	if r := inspect(t, s, "minority"); len(r.Holders) != 0 {
		t.Fatalf("a resource held on no quorum inspected as %+v", r)
	}
	// Held on a quorum until the third longest TTL, 40 s, runs out. A
	// counter this small is no clock reading: no Since.
	r := inspect(t, s, "quorum")
	if len(r.Holders) != 1 {
		t.Fatalf("Inspect = %+v, want one holder", r)
	}
	if h := r.Holders[0]; h.Owner != a || h.Token != 7 || h.Metadata != "meta" || h.TTL <= 39*time.Second || h.TTL > 40*time.Second || !h.Since.IsZero() {
		t.Fatalf("holder = %+v, want owner %s, token 7, metadata %q, TTL about 40s, no Since", h, a, "meta")
	}
}

func TestInspectNodesDownAndSlow(t *testing.T) {
	e := newEnv(t)
	const timeout, pause = 100 * time.Millisecond, 10 * time.Second
	c, s := e.client()
	fast := e.store(redlock.WithNodeTimeout(timeout))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	e.awaitEveryNode(name)
	owner := e.holders(name, 0)[0][:32]

	// Two of five nodes down: the holder is still on a quorum.
	e.srvs[1].Kill()
	e.srvs[3].Kill()
	if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Owner != owner {
		t.Fatalf("Inspect with 2 of 5 nodes down = %+v, want the holder %s", r, owner)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A third node paused: Inspect gives up on it at the node timeout.
	paused := time.Now()
	e.pause(4, pause)
	_, err = fast.Inspect(ctx, name)
	var ne *redlock.NodeError
	if !errors.Is(err, driver.ErrUnavailable) || !errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "no answer within the node timeout") {
		t.Fatalf("Inspect with 3 of 5 nodes out: %v, want ErrUnavailable with node errors", err)
	}
	if !time.Now().Before(paused.Add(pause)) {
		t.Fatalf("Inspect waited for the paused node (node timeout %s)", timeout)
	}
	if _, err := s.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	if _, err := redlock.New(nil).Inspect(ctx, "x"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("no clients: %v, want ErrInvalid", err)
	}
}

// awaitMetadata waits until every node holds resource for owner with
// metadata: Relabel returns with a quorum, the others' calls may still be
// on their way.
func awaitMetadata(t *testing.T, e *env, resource, owner, metadata string) {
	t.Helper()
	storetest.Await(t, 10*time.Second, "metadata "+metadata+" on every node", func() bool {
		return e.count(resource, owner+metadata) == nodes
	})
}

func TestRelabel(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = time.Minute
	req := request(name, ttl)
	req.Metadata = "zero"
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// A relabel that overtook the grant's late call to a node would find
	// no lock there, and that node would keep the first metadata.
	e.awaitEveryNode(name)
	for _, m := range []string{"one", "two"} {
		if err := s.Relabel(ctx, req, g, m); err != nil {
			t.Fatal(err)
		}
		if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Metadata != m || r.Holders[0].Owner != req.Owner {
			t.Fatalf("after Relabel %q: %+v", m, r)
		}
		awaitMetadata(t, e, name, req.Owner, m)
	}
	// The TTL is kept on every node.
	for i := range e.raw {
		if d := e.raw[i].PTTL(ctx, lockKey(name)).Val(); d <= 0 || d > ttl {
			t.Fatalf("node %d: PTTL %s after Relabel, want it in (0, %s]", i, d, ttl)
		}
	}
	// A relabel older than the node's is dropped: a late call cannot undo
	// a newer one.
	k := redislua.KeysFor("dlm:", name, "")
	if n, err := redislua.RedlockRelabel.Run(ctx, e.raw[0], []string{k.Lock, k.Label},
		req.Owner, "stale", redislua.LabelVersion(1), time.Hour.Milliseconds()).Int64(); err != nil || n != 1 {
		t.Fatalf("stale relabel: %d, %v", n, err)
	}
	if v := e.holders(name, 0)[0]; v != req.Owner+"two" {
		t.Fatalf("a stale relabel overwrote node 0: %q", v)
	}
	// Another owner may not relabel it.
	if err := s.Relabel(ctx, request(name, ttl), driver.Grant{}, "stolen"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by another owner: %v, want ErrNotHeld", err)
	}

	// Nodes 2 and 3 missed both relabels (the lock as acquired, no label);
	// node 4 has the newest; nodes 0 and 1 are down. The newest metadata
	// wins, though fewer of the nodes read hold it and they come first.
	for _, i := range []int{2, 3} {
		if err := e.raw[i].SetArgs(ctx, lockKey(name), req.Owner+"zero", goredisKeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		e.raw[i].Del(ctx, k.Label)
	}
	e.srvs[0].Kill()
	e.srvs[1].Kill()
	if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "two" {
		t.Fatalf("Inspect with an old metadata on 2 of the 3 nodes read = %+v, want %q", r, "two")
	}
	// Three nodes are a quorum.
	if err := s.Relabel(ctx, req, g, "three"); err != nil {
		t.Fatalf("Relabel with 2 of 5 nodes down: %v", err)
	}
	if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "three" {
		t.Fatalf("after Relabel with 2 of 5 nodes down: %+v", r)
	}
	e.srvs[2].Kill()
	var ne *redlock.NodeError
	if err := s.Relabel(ctx, req, g, "four"); !errors.Is(err, driver.ErrUnavailable) || !errors.As(err, &ne) {
		t.Fatalf("Relabel with 3 of 5 nodes down: %v, want ErrUnavailable with node errors", err)
	}
}

func TestRelabelReleased(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, time.Minute)
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after Release: %v, want ErrNotHeld", err)
	}
	// The release returned once a quorum released; the others follow,
	// and a relabel sets no lock on any node.
	storetest.Await(t, 10*time.Second, "every node released", func() bool { return e.count(name, "") == nodes })
}

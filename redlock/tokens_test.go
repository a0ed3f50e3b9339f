package redlock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/redislua"
	"github.com/dlmhq/dlm/internal/storetest"
)

// TestTokensAgreeAcrossNodes: the nodes of a quorum issue the same token
// (the client's floor), so every node holds the grant's token in its
// counter from the grant on, before and without a release, and the
// release has no counter to raise.
func TestTokensAgreeAcrossNodes(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	for i := range 3 {
		req := request(name, time.Minute)
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		e.awaitEveryNode(name)
		want := strconv.FormatUint(g.Token, 10)
		for n, rdb := range e.raw {
			if got := rdb.Get(ctx, lockKey(name)+":fence").Val(); got != want {
				t.Fatalf("grant %d: node %d's counter is %q, the grant's token %s", i, n, got, want)
			}
		}
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTokenFloorBounds: a node takes the client's floor only when it is
// ahead of the node's clock by less than a tenth of the TTL, so a client
// whose clock is far ahead cannot push the tokens, and the counter still
// rules over both.
func TestTokenFloorBounds(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	rdb := e.raw[0]
	acquire := func(name string, ttl time.Duration, floor int64) uint64 {
		t.Helper()
		k := redislua.KeysFor("dlm:", name, "")
		tickets, live := redislua.RedlockQueueKeys(k)
		req := request(name, ttl)
		res, err := redislua.RedlockAcquire.Run(ctx, rdb,
			[]string{k.Lock, k.Fence, k.Queue, tickets, live, k.Wake},
			req.Owner, ttl.Milliseconds(), "", time.Hour.Milliseconds(), "0", "0", 2000, k.WakeBase, floor).Slice()
		if err != nil || len(res) != 2 || res[0] != int64(1) {
			t.Fatalf("acquire %s: %v, %v", name, res, err)
		}
		return mustUint(t, res[1].(string))
	}
	now := func() int64 { return time.Now().UnixMicro() }

	near := now() + time.Second.Microseconds()
	if got := acquire("near", time.Minute, near); got != uint64(near) {
		t.Errorf("a floor 1 s ahead with a TTL of a minute: token %d, want the floor %d", got, near)
	}
	far := now() + time.Hour.Microseconds()
	if got := acquire("far", time.Minute, far); got >= uint64(far) || got < uint64(now()-time.Minute.Microseconds()) {
		t.Errorf("a floor an hour ahead: token %d, want the node's clock, not the floor %d", got, far)
	}
	short := now() + time.Second.Microseconds()
	if got := acquire("short", 5*time.Second, short); got >= uint64(short) {
		t.Errorf("a floor 1 s ahead with a TTL of 5 s: token %d, want the node's clock, not the floor %d", got, short)
	}
	// A counter ahead of the floor wins.
	ahead := now() + 2*time.Hour.Microseconds()
	rdb.Set(ctx, lockKey("counter")+":fence", ahead, time.Hour)
	if got := acquire("counter", time.Minute, now()+time.Second.Microseconds()); got != uint64(ahead)+1 {
		t.Errorf("a counter ahead of the floor: token %d, want %d", got, ahead+1)
	}
}

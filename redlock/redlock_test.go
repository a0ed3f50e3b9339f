package redlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redlock"
)

// request returns a store-level request for resource with a fresh owner.
func request(resource string, ttl time.Duration) driver.Request {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return driver.Request{Resource: resource, Owner: hex.EncodeToString(b[:]), Mode: driver.EX, TTL: ttl}
}

func TestMutualExclusion(t *testing.T) {
	e := newEnv(t)
	var clients []*dlm.Client
	for range 3 {
		c, _ := e.client()
		clients = append(clients, c)
	}
	name := storetest.MutualExclusion(t, clients, 24, 10, dlm.WithTTL(5*time.Second))
	// A release returns once a quorum released; the others follow.
	storetest.Await(t, 10*time.Second, "every node released", func() bool { return e.count(name, "") == nodes })
}

func TestMinorityDown(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	e.srvs[1].Kill()
	e.srvs[3].Kill()

	l, err := c.Acquire(ctx, name, dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("acquire with 2 of 5 nodes down: %v", err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("extend with 2 of 5 nodes down: %v", err)
	}
	if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("second acquire = %v, want ErrNotAcquired only", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with 2 of 5 nodes down: %v", err)
	}
	if n := e.count(name, ""); n != nodes {
		t.Fatalf("lock left on %d live nodes after release", nodes-n)
	}
}

func TestMajorityDownIsUnavailable(t *testing.T) {
	e := newEnv(t)
	const timeout = 50 * time.Millisecond
	c, _ := e.client(redlock.WithNodeTimeout(timeout))
	patient, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	held, err := patient.Acquire(ctx, name, dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 4} {
		e.srvs[i].Kill()
	}

	start := time.Now()
	_, err = c.Acquire(ctx, storetest.Resource(t), dlm.WithWait(0))
	took := time.Since(start)
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("acquire with 3 of 5 nodes down = %v, want ErrUnavailable only", err)
	}
	// One attempt, its cleanup and dlm's cleanup release: each bounded by
	// the node timeout (and much faster here, the dead nodes refuse). The
	// bound only tells a call that hangs or retries from one that does
	// not: it leaves a loaded machine plenty of slack.
	t.Logf("acquire with 3 of 5 nodes down took %s", took)
	if took > 5*time.Second {
		t.Fatalf("acquire with 3 of 5 nodes down took %s, want about the node timeout %s", took, timeout)
	}
	for _, i := range []int{0, 2, 4} {
		if !strings.Contains(err.Error(), "redlock node "+strconv.Itoa(i)+" ("+e.srvs[i].Addr()+")") {
			t.Errorf("the error does not name node %d (%s): %v", i, e.srvs[i].Addr(), err)
		}
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("no *NodeError in %v", err)
	}

	// A held lock on the two live nodes does not make it contention.
	_, err = s.Acquire(ctx, request(name, 10*time.Second))
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("store acquire of a held lock with 3 of 5 nodes down = %v, want ErrUnavailable only", err)
	}
	_, err = c.Acquire(ctx, name, dlm.WithWait(200*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("waiting with 3 of 5 nodes down = %v, want ErrUnavailable only", err)
	}
	storetest.UnavailableIsNotContention(t, c)

	// The holder can neither extend nor release, and is not told it lost
	// the lock: that is for its deadline to say.
	if err := held.Extend(ctx); !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrLost) {
		t.Fatalf("extend with 3 of 5 nodes down = %v, want ErrUnavailable", err)
	}
	if err := held.Release(ctx); !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrLost) {
		t.Fatalf("release with 3 of 5 nodes down = %v, want ErrUnavailable", err)
	}
}

func TestSlowNode(t *testing.T) {
	e := newEnv(t)
	// Waiting for the slow node would take the node timeout at least, and
	// the pause outlasts it: the calls must return before either, which a
	// loaded machine's few hundred milliseconds do not blur.
	const timeout, pause = 3 * time.Second, 15 * time.Second
	c, _ := e.client(redlock.WithNodeTimeout(timeout))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = 10 * time.Second
	// Warm the connections, so that the pause is all that differs.
	_ = c.Do(ctx, storetest.Resource(t), func(context.Context, *dlm.Lease) error { return nil })

	paused := time.Now()
	e.pause(2, pause)
	start := time.Now()
	l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(0))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("acquire with one paused node: %v", err)
	}
	t.Logf("acquire with one node paused took %s", took)
	if took >= timeout {
		t.Fatalf("acquire took %s with one node paused for %s (node timeout %s): it waited for the slow node", took, pause, timeout)
	}
	if d := l.Deadline(); d.After(start.Add(ttl)) {
		t.Fatalf("deadline %s is past the request start + TTL", d.Sub(start))
	}
	start = time.Now()
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("extend with one paused node: %v", err)
	}
	if took := time.Since(start); took >= timeout {
		t.Fatalf("extend took %s: it waited for the slow node", took)
	}
	// Release returns once a quorum released: it waits neither for the
	// calls still on their way to the paused node nor for its release
	// there, which follows them and gives up at the node timeout.
	start = time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with one paused node: %v", err)
	}
	took = time.Since(start)
	t.Logf("release with one node paused took %s (node timeout %s)", took, timeout)
	if took >= timeout {
		t.Fatalf("release took %s with one node paused (node timeout %s): it waited for the slow node", took, timeout)
	}
	storetest.Await(t, time.Until(paused.Add(pause)), "the other nodes released", func() bool {
		for _, h := range e.holders(name, 0, 1, 3, 4) {
			if h != "" {
				return false
			}
		}
		return true
	})
	// Every call to the paused node gave up at the node timeout: none of
	// the store's goroutines is left, before the pause ends.
	storetest.Await(t, time.Until(paused.Add(pause)), "the store's goroutines to end", func() bool { return ours() == 0 })
	// Once the pause ends, the paused node runs the acquire and then the
	// release that followed it there: no lock is left behind.
	storetest.Await(t, time.Until(paused.Add(pause+10*time.Second)), "the paused node to run the release after the acquire", func() bool {
		return e.holders(name, 2)[2] == ""
	})
}

func TestCallsOutliveTheCallersContext(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	name := storetest.Resource(t)
	req := request(name, 10*time.Second)
	// dlm cancels the context of a wait as soon as Acquire returns: the
	// nodes that had not answered yet must still get the lock.
	ctx, cancel := context.WithCancel(context.Background())
	g, err := s.Acquire(ctx, req)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	storetest.Await(t, 10*time.Second, "lock granted on every node", func() bool {
		return e.count(name, req.Owner) == nodes
	})
	if err := s.Release(storetest.Context(t), req, g); err != nil {
		t.Fatal(err)
	}
}

func TestContextEndsAttempt(t *testing.T) {
	e := newEnv(t)
	const timeout = 300 * time.Millisecond
	s := e.store(redlock.WithNodeTimeout(timeout))
	_ = s.Release(storetest.Context(t), request(storetest.Resource(t), time.Second), driver.Grant{}) // warm up
	// The pause outlasts the attempt and its cleanup by far, however
	// loaded the machine.
	const pause = 10 * time.Second
	paused := time.Now()
	for _, i := range []int{0, 1, 2} {
		e.pause(i, pause)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Acquire(ctx, request(storetest.Resource(t), 10*time.Second))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrTaken) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("acquire whose context ended = %v, want the context's error only", err)
	}
	// The attempt still cleans up, each node within the node timeout: it
	// returns long before the paused nodes answer.
	t.Logf("acquire took %s (context 50ms, node timeout %s)", took, timeout)
	if !time.Now().Before(paused.Add(pause)) {
		t.Fatalf("acquire took %s after its context ended: it waited for the paused nodes", took)
	}
}

func TestValidityCountsElapsedTime(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	// Warm the connections.
	_ = s.Release(ctx, request(name, 10*time.Second), driver.Grant{})
	// A quorum answers only after the TTL: the grant is worthless. The
	// pauses, set one after the other, must still all be on when the
	// attempt starts, however slowly a loaded machine sets them; and end
	// well within the clients' read timeout (2s).
	const ttl, pause = 150 * time.Millisecond, time.Second
	for _, i := range []int{0, 1, 2} {
		e.pause(i, pause)
	}
	_, err := s.Acquire(ctx, request(name, ttl))
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrTaken) || !strings.Contains(err.Error(), "no validity") {
		t.Fatalf("acquire granted after the TTL = %v, want ErrUnavailable for no validity", err)
	}
	if n := e.count(name, ""); n != nodes {
		t.Fatalf("the late attempt left its lock on %d nodes", nodes-n)
	}
}

func TestFailedAttemptLeavesNothing(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	other := strings.Repeat("b", 32)

	t.Run("quorum taken", func(t *testing.T) {
		name := storetest.Resource(t)
		for _, i := range []int{0, 1, 2} {
			e.raw[i].Set(ctx, lockKey(name), other, time.Minute)
		}
		_, err := s.Acquire(ctx, request(name, 10*time.Second))
		if !errors.Is(err, driver.ErrTaken) || errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("acquire = %v, want ErrTaken only", err)
		}
		if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("dlm acquire = %v, want ErrNotAcquired", err)
		}
		if got := e.holders(name); got[0] != other || got[1] != other || got[2] != other || got[3] != "" || got[4] != "" {
			t.Fatalf("locks after failed attempts: %v", got)
		}
	})
	t.Run("split vote with a node down", func(t *testing.T) {
		name := storetest.Resource(t)
		for _, i := range []int{0, 1} {
			e.raw[i].Set(ctx, lockKey(name), other, time.Minute)
		}
		e.srvs[2].Kill()
		defer e.srvs[2].Restart()
		_, err := s.Acquire(ctx, request(name, 10*time.Second))
		if !errors.Is(err, driver.ErrTaken) || errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("acquire = %v, want ErrTaken only (4 of 5 nodes answered)", err)
		}
		if !strings.Contains(err.Error(), "redlock node 2") {
			t.Errorf("the error does not mention the silent node: %v", err)
		}
		if got := e.holders(name); got[0] != other || got[1] != other || got[3] != "" || got[4] != "" {
			t.Fatalf("locks after the failed attempt: %v", got)
		}
	})
}

func TestTokensIncrease(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	k := storetest.NewTokens(t, c, dlm.WithWait(10*time.Second))
	for range 10 {
		if err := k.Next("sequential", name).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l := k.Next("before expiry", name, dlm.WithTTL(50*time.Millisecond))
	<-l.Lost()
	storetest.Await(t, 10*time.Second, "key expiry", func() bool { return e.count(name, "") == nodes })
	k.Next("after expiry", name).Release(ctx)

	e.srvs[0].Kill()
	e.srvs[0].Restart()
	k.Next("after a node restarted without persistence", name).Release(ctx)

	// A node whose counter is far ahead (as if its clock were): the
	// token of a grant through it is large, and the release raises the
	// other nodes' counters to it, so that the next holder's token is
	// larger even when its quorum does not include that node.
	ahead := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	e.raw[0].Set(ctx, lockKey(name)+":fence", ahead, time.Hour)
	e.srvs[3].Kill()
	e.srvs[4].Kill()
	if l := k.Next("through the node ahead", name); l.Token() <= mustUint(t, ahead) {
		t.Fatalf("token %d is not above the counter %s of a granting node", l.Token(), ahead)
	} else {
		l.Release(ctx)
	}
	e.srvs[3].Restart()
	e.srvs[4].Restart()
	e.srvs[0].Kill()
	k.Next("without the node ahead", name).Release(ctx)
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestExtendSetsLockAgainOnRestartedNode(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	// A TTL that outlasts the restart however loaded the machine.
	const ttl = time.Minute
	l, err := c.Acquire(ctx, name, dlm.WithTTL(ttl), dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returned with a quorum; the other nodes' grants may still be
	// on their way.
	var value string
	storetest.Await(t, 10*time.Second, "lock granted on every node", func() bool {
		value = e.holders(name)[0]
		return value != "" && e.count(name, value) == nodes
	})
	e.srvs[0].Kill()
	e.srvs[0].Restart()
	if got := e.holders(name)[0]; got != "" {
		t.Fatalf("restarted node still holds %q", got)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	// Extend returned with a quorum; the restarted node's answer may
	// still be on its way.
	storetest.Await(t, 10*time.Second, "lock set again on the restarted node", func() bool {
		return e.holders(name)[0] == value
	})
	if pttl := e.raw[0].PTTL(ctx, lockKey(name)).Val(); pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL on the restarted node = %s, want the lease's TTL", pttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.Await(t, 10*time.Second, "every node released", func() bool { return e.count(name, "") == nodes })
}

func TestLostLockIsNotHeld(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	other := strings.Repeat("b", 32)
	takeOver := func(name string) {
		for _, i := range []int{0, 1, 2} {
			e.raw[i].Set(ctx, lockKey(name), other, time.Minute)
		}
	}

	t.Run("extend", func(t *testing.T) {
		name := storetest.Resource(t)
		l, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		takeOver(name)
		err = l.Extend(ctx)
		if !errors.Is(err, dlm.ErrLost) || !errors.Is(err, dlm.ErrNotHeld) {
			t.Fatalf("extend = %v, want ErrLost and ErrNotHeld", err)
		}
		// Nothing of the lost lease is left on the other nodes.
		if got := e.holders(name); got[0] != other || got[1] != other || got[2] != other || got[3] != "" || got[4] != "" {
			t.Fatalf("locks after the lost extend: %v", got)
		}
	})
	t.Run("release", func(t *testing.T) {
		name := storetest.Resource(t)
		l, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		takeOver(name)
		err = l.Release(ctx)
		if !errors.Is(err, dlm.ErrLost) || !errors.Is(err, dlm.ErrNotHeld) {
			t.Fatalf("release = %v, want ErrLost and ErrNotHeld", err)
		}
		if got := e.holders(name); got[0] != other || got[1] != other || got[2] != other || got[3] != "" || got[4] != "" {
			t.Fatalf("locks after the release: %v", got)
		}
	})
}

func TestRestartGuard(t *testing.T) {
	e := newEnv(t)
	const guard = 400 * time.Millisecond
	s := e.store(redlock.WithRestartGuard(guard))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)

	// New nodes wait one guard before they vote.
	_, err := s.Acquire(ctx, request(name, 10*time.Second))
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "restart guard") {
		t.Fatalf("acquire on new nodes = %v, want ErrUnavailable for the restart guard", err)
	}
	if n := e.count(name, ""); n != nodes {
		t.Fatalf("the refused attempt left its lock on %d nodes", nodes-n)
	}
	holder := request(name, time.Minute)
	var g driver.Grant
	storetest.Await(t, 10*time.Second, "the guard to pass", func() bool {
		g, err = s.Acquire(ctx, holder)
		return err == nil
	})

	// A minority restarts: contention is still seen, and the holder's
	// extend sets the lock again on the restarted node.
	e.srvs[0].Kill()
	e.srvs[0].Restart()
	if _, err := s.Acquire(ctx, request(name, 10*time.Second)); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("acquire after a minority restarted = %v, want ErrTaken", err)
	}
	if err := s.Extend(ctx, holder, g); err != nil {
		t.Fatalf("extend after a minority restarted: %v", err)
	}
	storetest.Await(t, 10*time.Second, "lock set again on the restarted node", func() bool {
		return e.holders(name)[0] == holder.Owner
	})

	// A majority restarts and forgets the lock. Without the guard a
	// second owner would win it at once; with it those nodes stay out.
	for _, i := range []int{0, 1, 2} {
		e.srvs[i].Kill()
		e.srvs[i].Restart()
	}
	_, err = s.Acquire(ctx, request(name, 10*time.Second))
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("acquire after a majority restarted = %v, want ErrUnavailable", err)
	}
	unguarded := e.store()
	second := request(name, 10*time.Second)
	if _, err := unguarded.Acquire(ctx, second); err != nil {
		t.Fatalf("without the guard the forgotten lock should be granted again (the danger the guard averts), got %v", err)
	}
	if err := unguarded.Release(ctx, second, driver.Grant{}); err != nil {
		t.Fatal(err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	plain := goredis.NewClient(&goredis.Options{Addr: e.srvs[0].Addr()})
	t.Cleanup(func() { plain.Close() })
	cs := e.clients()
	cases := []struct {
		name    string
		clients []goredis.UniversalClient
		opts    []redlock.Option
	}{
		{"no clients", nil, nil},
		{"nil client", []goredis.UniversalClient{cs[0], nil, cs[2]}, nil},
		{"same server twice", []goredis.UniversalClient{cs[0], cs[1], cs[0]}, nil},
		{"no context timeouts", []goredis.UniversalClient{plain, cs[1], cs[2]}, nil},
		{"brace in prefix", cs, []redlock.Option{redlock.WithPrefix("a{b")}},
		{"negative node timeout", cs, []redlock.Option{redlock.WithNodeTimeout(-time.Second)}},
		{"drift factor", cs, []redlock.Option{redlock.WithDriftFactor(0.7)}},
		{"fence retention", cs, []redlock.Option{redlock.WithFenceRetention(time.Second)}},
		{"negative guard", cs, []redlock.Option{redlock.WithRestartGuard(-time.Second)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := redlock.New(tc.clients, tc.opts...)
			req := request("r", time.Second)
			_, err := s.Acquire(ctx, req)
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("Acquire = %v, want ErrInvalid", err)
			}
			if err := s.Extend(ctx, req, driver.Grant{}); !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("Extend = %v, want ErrInvalid", err)
			}
			if err := s.Release(ctx, req, driver.Grant{}); !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("Release = %v, want ErrInvalid", err)
			}
			if _, err := dlm.New(s).Acquire(ctx, "r"); !errors.Is(err, dlm.ErrInvalid) || errors.Is(err, dlm.ErrUnavailable) {
				t.Fatalf("dlm Acquire = %v, want ErrInvalid only", err)
			}
		})
	}

	c, s := e.client()
	storetest.BadInput(t, c)
	if s.Name() != "redlock" {
		t.Fatalf("Name = %q", s.Name())
	}
	for _, m := range []dlm.Mode{dlm.NL, dlm.CR, dlm.CW, dlm.PR, dlm.PW} {
		if _, err := c.Acquire(ctx, "r", dlm.WithMode(m)); !errors.Is(err, dlm.ErrUnsupported) {
			t.Fatalf("mode %s: err = %v, want ErrUnsupported", m, err)
		}
	}
	// Names with braces and percent signs are fine.
	for _, name := range []string{"}a", "a}b{c", "100%", "{x}"} {
		l, err := c.Acquire(ctx, name, dlm.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		l.Release(ctx)
	}
}

func TestElection(t *testing.T) {
	c, _ := newEnv(t).client()
	storetest.Election(t, c, false, dlm.WithPollInterval(20*time.Millisecond))
}

func TestCancellation(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	checker, _ := e.client()
	storetest.Cancellation(t, c, checker, storetest.Cancels{Elections: true})
}

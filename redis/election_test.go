package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redis"
)

// request returns a store-level request for resource with a fresh owner.
func request(resource string, ttl time.Duration, metadata string) driver.Request {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return driver.Request{Resource: resource, Owner: hex.EncodeToString(b[:]), Mode: driver.EX, TTL: ttl, Metadata: metadata}
}

// inspected lists one resource by Inspect, so that the listing scenarios
// of package storetest check what Inspect shows: the prefix is the name.
type inspected struct{ driver.Inspector }

func (i inspected) List(ctx context.Context, prefix string, _ int) ([]driver.ResourceInfo, error) {
	r, err := i.Inspect(ctx, prefix)
	if err != nil || len(r.Holders) == 0 && len(r.Waiters) == 0 {
		return nil, err
	}
	return []driver.ResourceInfo{r}, nil
}

// sinceWithin fails the test unless the holder's Since lies between the
// start of the lease's acquisition and now (the server runs on this
// machine's clock; 1 ms allows for the rounding of the clocks' readings).
func sinceWithin(t *testing.T, h driver.HolderInfo, from time.Time) {
	t.Helper()
	if h.Since.Before(from.Add(-time.Millisecond)) || h.Since.After(time.Now().Add(time.Millisecond)) {
		t.Fatalf("holder granted at %s, outside the acquisition that began at %s", h.Since, from)
	}
}

func TestInspectHolderAndWaitersInOrder(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	for _, name := range []string{"", "a}b{c%"} {
		storetest.ListQueue(t, storetest.ListedQueue{
			Holder: c, Lister: inspected{s}, Resource: name,
			OwnerIDs: true, Tokens: true, MaxTTL: storetest.ListTTL, Metadata: "host-a pid 1",
			CheckHolder: func(t *testing.T, h driver.HolderInfo, l *dlm.Lease) { sinceWithin(t, h, l.AcquiredAt()) },
		})
	}
}

func TestInspectAgreesWithList(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	if r, err := s.Inspect(ctx, name); err != nil || r.Resource != name || len(r.Holders) != 0 || len(r.Waiters) != 0 {
		t.Fatalf("Inspect of a free resource = %+v, %v; want it empty", r, err)
	}
	req := request(name, time.Minute, "leader A")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := request(name, time.Minute, "")
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, waiter)
		done <- err
	}()
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })

	got, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	listed, ok := storetest.Listed(t, s, name)
	if !ok || len(got.Holders) != 1 || len(listed.Holders) != 1 || len(got.Waiters) != 1 || len(listed.Waiters) != 1 {
		t.Fatalf("Inspect = %+v, List = %+v; want one holder and one waiter in both", got, listed)
	}
	h, lh := got.Holders[0], listed.Holders[0]
	if h.Owner != req.Owner || h.Metadata != "leader A" || h.Token != g.Token || h.Since.IsZero() ||
		lh.Owner != h.Owner || lh.Metadata != h.Metadata || lh.Token != h.Token || !lh.Since.Equal(h.Since) {
		t.Fatalf("Inspect's holder %+v, List's %+v; want owner %s, token %d", h, lh, req.Owner, g.Token)
	}
	if got.Waiters[0] != listed.Waiters[0] || got.Waiters[0].Owner != waiter.Owner {
		t.Fatalf("Inspect's waiter %+v, List's %+v; want owner %s", got.Waiters[0], listed.Waiters[0], waiter.Owner)
	}
	cancel()
	if err := <-done; !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Inspect(ctx, name); err != nil || len(r.Holders) != 0 || len(r.Waiters) != 0 {
		t.Fatalf("Inspect after the release = %+v, %v; want it empty", r, err)
	}
}

func TestInspectErrors(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	if _, err := s.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	if _, err := redis.New(e.rdb, redis.WithPrefix("a{")).Inspect(ctx, "x"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("bad prefix: %v, want ErrInvalid", err)
	}
	// The script is sent whole when Redis lost it.
	req := request("flushed", time.Minute, "m")
	if _, err := s.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Inspect(ctx, "flushed"); err != nil || len(r.Holders) != 1 || r.Holders[0].Owner != req.Owner {
		t.Fatalf("Inspect after SCRIPT FLUSH = %+v, %v", r, err)
	}
	e.srv.Kill()
	if _, err := s.Inspect(ctx, "x"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("server down: %v, want ErrUnavailable", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Inspect(cctx, "x"); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("cancelled: %v, want context.Canceled only", err)
	}
}

func TestRelabel(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	const ttl = time.Minute
	req := request(name, ttl, "first")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Inspect(ctx, name)
	if err != nil || len(r.Holders) != 1 || r.Holders[0].Since.IsZero() {
		t.Fatalf("Inspect of the lock = %+v, %v; want its holder with the grant's time", r, err)
	}
	since := r.Holders[0].Since
	if err := s.Relabel(ctx, req, g, "second"); err != nil {
		t.Fatal(err)
	}
	if r, err = s.Inspect(ctx, name); err != nil {
		t.Fatal(err)
	}
	// The TTL is kept: a SET without it would leave the key without
	// expiry. So is the grant's time.
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "second" || r.Holders[0].Owner != req.Owner ||
		r.Holders[0].Token != g.Token || r.Holders[0].TTL <= 0 || r.Holders[0].TTL > ttl || !r.Holders[0].Since.Equal(since) {
		t.Fatalf("after Relabel: %+v, want metadata %q, token %d, TTL in (0, %s], since %s", r, "second", g.Token, ttl, since)
	}
	// Another owner may not relabel it.
	other := request(name, ttl, "")
	if err := s.Relabel(ctx, other, driver.Grant{}, "stolen"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by another owner: %v, want ErrNotHeld", err)
	}
	if r, _ := s.Inspect(ctx, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "second" {
		t.Fatalf("another owner's Relabel changed the holder: %+v", r)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "third"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after Release: %v, want ErrNotHeld", err)
	}
	if n := e.rdb.Exists(ctx, "dlm:{"+name+"}").Val(); n != 0 {
		t.Fatal("Relabel of a free lock set it")
	}
}

// watch watches resource on s and fails the test on an error.
func watch(t *testing.T, ctx context.Context, s *redis.Store, resource string) <-chan struct{} {
	t.Helper()
	ch, err := s.Watch(ctx, resource)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// pending reports whether ch holds a signal or is closed.
func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watches counts the store's watches and listeners still running.
func watches() int { return storetest.Goroutines("github.com/dlmhq/dlm/redis.(*Store)") }

func TestWatchNotify(t *testing.T) {
	e := newEnv(t)
	// A long interval: every signal below is a notice.
	_, s := e.client(redis.WithWatchInterval(time.Hour))
	_, other := e.client()
	ctx := storetest.Context(t)
	before := watches()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const name = "a}b"
	ch := watch(t, wctx, s, name)
	if pending(ch) {
		t.Fatal("signal before any notice")
	}
	// A notice published right after Watch returned, by another client,
	// reaches the watch.
	if err := other.Notify(ctx, name); err != nil {
		t.Fatal(err)
	}
	storetest.Within(t, ch, 10*time.Second, "the notice")
	// The notice goes to the resource's own channel, named like its keys
	// (in its hash slot).
	raw := e.rdb.PSubscribe(ctx, "dlm:*")
	defer raw.Close()
	if _, err := raw.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Notify(ctx, name); err != nil {
		t.Fatal(err)
	}
	msg, err := raw.ReceiveMessage(ctx)
	if err != nil || msg.Channel != "dlm:{a%7Db}:watch" {
		t.Fatalf("notice on %v (%v), want channel %q", msg, err, "dlm:{a%7Db}:watch")
	}
	storetest.Within(t, ch, 10*time.Second, "the second notice")

	cancel()
	for range ch { // notices may be left; the channel must close
	}
	storetest.Await(t, 10*time.Second, "the watch's goroutines ended", func() bool { return watches() <= before })
}

func TestWatchSignalsAVanishedHolder(t *testing.T) {
	e := newEnv(t)
	_, s := e.client(redis.WithWatchInterval(20 * time.Millisecond))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	// The holder's key expires: nobody notifies.
	req := request(name, 200*time.Millisecond, "crashed")
	if _, err := s.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	ch := watch(t, ctx, s, name)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
		case <-deadline:
			t.Fatal("the watch did not signal the holder's expiry")
		}
		r, err := s.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Holders) == 0 {
			return
		}
	}
}

func TestWatchEnds(t *testing.T) {
	e := newEnv(t)
	_, s := e.client(redis.WithWatchInterval(time.Hour))
	ctx := storetest.Context(t)

	// Close ends the watches, and no new one starts.
	ch := watch(t, ctx, s, "a")
	s.Close()
	storetest.Within(t, drained(ch), 10*time.Second, "the watch's end at Close")
	if _, err := s.Watch(ctx, "a"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("Watch on a closed store: %v, want ErrInvalid", err)
	}

	// A failed connection ends the watch; watching again fails while
	// Redis is down.
	_, s2 := e.client(redis.WithWatchInterval(time.Hour))
	ch = watch(t, ctx, s2, "a")
	e.srv.Kill()
	storetest.Within(t, drained(ch), 10*time.Second, "the watch's end when Redis died")
	if _, err := s2.Watch(ctx, "a"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Watch with Redis down: %v, want ErrUnavailable", err)
	}
	if err := s2.Notify(ctx, "a"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Notify with Redis down: %v, want ErrUnavailable", err)
	}
	if _, err := s2.Watch(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("Watch of an empty name: %v, want ErrInvalid", err)
	}
	if err := s2.Notify(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("Notify of an empty name: %v, want ErrInvalid", err)
	}
	if _, err := redis.New(e.rdb, redis.WithWatchInterval(time.Millisecond)).Watch(ctx, "a"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("watch interval of 1ms: %v, want ErrInvalid", err)
	}
}

// drained returns a channel closed once ch is closed, reading what ch
// still holds.
func drained(ch <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}

func TestWatchEndsWhenTheConnectionHangs(t *testing.T) {
	e := newEnv(t)
	// Through a proxy that stops relaying: no error, only silence, which
	// the unanswered PING reveals.
	proxy := testenv.StartProxy(t, e.srv.Addr())
	rdb := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	defer rdb.Close()
	s := redis.New(rdb, redis.WithWatchInterval(50*time.Millisecond))
	defer s.Close()
	ctx := storetest.Context(t)
	ch := watch(t, ctx, s, "a")
	proxy.Stall()
	defer proxy.Resume()
	storetest.Within(t, drained(ch), 10*time.Second, "the watch's end on a hung connection")
}

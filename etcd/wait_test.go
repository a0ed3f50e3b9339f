package etcd_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestWaitTimeoutIsNotAcquired(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	storetest.WaitTimeoutIsContention(t, c, 150*time.Millisecond, 1, e.onlyHolder)
}

func TestContextCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	storetest.ContextCancelWhileWaiting(t, c, e.waiting, e.onlyHolder)
}

// request returns a driver request as package dlm would make it.
func request(name, owner string) driver.Request {
	return driver.Request{Resource: name, Owner: strings.Repeat(owner, 32)[:32], Mode: driver.EX, TTL: 5 * time.Second}
}

func TestWaiterReturnsWhenItsLeaseDies(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder := request(name, "a")
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, holder, g)

	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(ctx, request(name, "b"))
		done <- err
	}()
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })
	resp, err := e.raw.Get(ctx, e.keys(name)[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second): // it would wait for good; slack for a loaded machine
		t.Fatal("the waiter kept waiting after its lease was revoked")
	}
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("err = %v, want ErrUnavailable only", err)
	}
}

func TestRetriedAttemptKeepsItsPlace(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "c")
	g1, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s.AcquireWait(ctx, req) // its reply was lost, say
	if err != nil {
		t.Fatal(err)
	}
	if g1.Token != g2.Token {
		t.Fatalf("tokens %d and %d: a retry must get the grant it made", g1.Token, g2.Token)
	}
	// Package dlm releases an attempt of unknown outcome with an empty grant.
	if err := s.Extend(ctx, req, driver.Grant{}); err != nil {
		t.Fatalf("Extend without a handle: %v", err)
	}
	if err := s.Release(ctx, req, driver.Grant{}); err != nil {
		t.Fatalf("Release without a handle: %v", err)
	}
	if keys := e.keys(name); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
	if err := s.Release(ctx, req, g1); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if err := s.Extend(ctx, req, g1); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Extend after Release = %v, want ErrNotHeld", err)
	}
}

func TestUnavailableIsNotContention(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client(etcdTimeout)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	if _, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A waiter whose store dies under it.
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, dlm.WithTTL(time.Second), dlm.WithWait(3*time.Second))
		done <- err
	}()
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	e.srv.Kill()
	err := <-done
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("waiting while etcd died = %v, want ErrUnavailable only", err)
	}
	storetest.UnavailableIsNotContention(t, c)
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := storetest.Context(t)
	storetest.BadInput(t, c)
	// The store checks what it is given directly, too.
	ok := request("r", "d")
	for what, req := range map[string]driver.Request{
		"empty resource": {Resource: "", Owner: ok.Owner, Mode: driver.EX, TTL: time.Second},
		"empty owner":    {Resource: "r", Owner: "", Mode: driver.EX, TTL: time.Second},
		"owner with '/'": {Resource: "r", Owner: "a/b", Mode: driver.EX, TTL: time.Second},
		"zero TTL":       {Resource: "r", Owner: ok.Owner, Mode: driver.EX},
		"no mode":        {Resource: "r", Owner: ok.Owner, TTL: time.Second},
	} {
		if _, err := s.Acquire(ctx, req); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: Acquire = %v, want ErrInvalid", what, err)
		}
		if _, err := s.AcquireWait(ctx, req); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: AcquireWait = %v, want ErrInvalid", what, err)
		}
		if err := s.Release(ctx, req, driver.Grant{}); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: Release = %v, want ErrInvalid", what, err)
		}
	}
	for what, st := range map[string]*etcd.Store{
		"nil client":   etcd.New(nil),
		"zero timeout": etcd.New(e.raw, etcd.WithRequestTimeout(0)),
	} {
		if _, err := st.Acquire(ctx, ok); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", what, err)
		}
	}
}

func TestKeyLayout(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	// Names that share a path prefix, or look escaped, are distinct locks.
	names := []string{"a", "a/b", "a%2Fb", "a/", "/", "%", "{x}"}
	var held []*dlm.Lease
	for _, name := range names {
		l, err := c.Acquire(ctx, name, dlm.WithWait(0), dlm.WithMetadata("host-1"))
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		held = append(held, l)
	}
	for i, name := range names {
		keys := e.keys(name)
		if len(keys) != 1 {
			t.Fatalf("%q: keys %q, want one", name, keys)
		}
		resp, err := e.raw.Get(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		kv := resp.Kvs[0]
		mode, rest, _ := strings.Cut(string(kv.Value), " ")
		owner, meta, _ := strings.Cut(rest, "\n")
		if mode != "EX" || len(owner) != 32 || meta != "host-1" || uint64(kv.CreateRevision) != held[i].Token() {
			t.Fatalf("%q: value %q, create revision %d; want \"EX <owner>\\nhost-1\", %d", name, kv.Value, kv.CreateRevision, held[i].Token())
		}
		if want := fmt.Sprintf("%x-0", kv.Lease); !strings.HasSuffix(keys[0], "/"+want) {
			t.Fatalf("%q: key %q, want it to end in the lease and the first slot, %q", name, keys[0], want)
		}
		held[i].Release(ctx)
	}
	// Another prefix is another lock space.
	other := dlm.New(etcd.New(e.raw, etcd.WithPrefix("other/")))
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	l2, err := other.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("the same name under another prefix: %v", err)
	}
	resp, err := e.raw.Get(ctx, "other/"+escaper.Replace(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 1 {
		t.Fatalf("keys under the other prefix: %v, %v", resp, err)
	}
	l2.Release(ctx)
}

func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	// Waits ended, so their watches and etcd's watch streams are gone;
	// Close stops the session's keep-alive.
	closeStore := func() {
		if err := s.Close(storetest.Context(t)); err != nil {
			t.Error(err)
		}
	}
	storetest.NoGoroutineLeak(t, c, 8, closeStore, "github.com/dlmhq/dlm.", "github.com/dlmhq/dlm/etcd.", "watchGRPCStream")
}

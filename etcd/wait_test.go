package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
)

func TestWaitTimeoutIsNotAcquired(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	holder, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)

	start := time.Now()
	_, err = c.Acquire(ctx, name, dlm.WithWait(150*time.Millisecond))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("err = %v: a wait that ran out is contention only", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("gave up after %s, before the wait", d)
	}
	_, err = c.Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("try-lock err = %v, want ErrNotAcquired", err)
	}
	if keys := e.keys(name); len(keys) != 1 {
		t.Fatalf("keys = %q, want the holder's only", keys)
	}
}

func TestContextCancelWhileWaiting(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	name := resource(t)
	holder, err := c.Acquire(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctxT(t))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name)
		done <- err
	}()
	await(t, 5*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })
	cancel()
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("Acquire did not return promptly after cancel")
	}
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	if keys := e.keys(name); len(keys) != 1 {
		t.Fatalf("keys = %q: the cancelled waiter's key is still there", keys)
	}

	// A deadline, likewise.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err = c.Acquire(dctx, name)
	if !errors.Is(err, dlm.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired joined with DeadlineExceeded", err)
	}
	if keys := e.keys(name); len(keys) != 1 {
		t.Fatalf("keys = %q: the timed-out waiter's key is still there", keys)
	}
}

// request returns a driver request as package dlm would make it.
func request(name, owner string) driver.Request {
	return driver.Request{Resource: name, Owner: strings.Repeat(owner, 32)[:32], Mode: driver.EX, TTL: 5 * time.Second}
}

func TestWaiterReturnsWhenItsLeaseDies(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := ctxT(t)
	name := resource(t)
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
	await(t, 5*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })
	resp, err := e.raw.Get(ctx, e.keys(name)[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(time.Second):
		t.Fatal("the waiter kept waiting after its lease was revoked")
	}
	if !errors.Is(err, driver.ErrUnavailable) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("err = %v, want ErrUnavailable only", err)
	}
}

func TestRetriedAttemptKeepsItsPlace(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := ctxT(t)
	name := resource(t)
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
	ctx := ctxT(t)
	name := resource(t)
	if _, err := c.Acquire(ctx, name, dlm.WithTTL(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A waiter whose store dies under it.
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, dlm.WithTTL(time.Second), dlm.WithWait(3*time.Second))
		done <- err
	}()
	await(t, 5*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })
	e.srv.Kill()
	err := <-done
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("waiting while etcd died = %v, want ErrUnavailable only", err)
	}
	_, err = c.Acquire(ctx, resource(t), dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("one attempt on a dead server = %v, want ErrUnavailable only", err)
	}
	_, err = c.Acquire(ctx, resource(t), dlm.WithWait(200*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("waiting on a dead server = %v, want ErrUnavailable only", err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	c, s := e.client()
	ctx := ctxT(t)
	cases := []struct {
		name     string
		resource string
		opts     []dlm.Option
		want     error
	}{
		{"empty name", "", nil, dlm.ErrInvalid},
		{"long name", strings.Repeat("x", dlm.MaxResourceBytes+1), nil, dlm.ErrInvalid},
		{"invalid UTF-8", "a\xffb", nil, dlm.ErrInvalid},
		{"zero TTL", "r", []dlm.Option{dlm.WithTTL(0)}, dlm.ErrInvalid},
		{"unknown mode", "r", []dlm.Option{dlm.WithMode(dlm.Mode(42))}, dlm.ErrInvalid},
		{"negative wait", "r", []dlm.Option{dlm.WithWait(-time.Second)}, dlm.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Acquire(ctx, tc.resource, tc.opts...)
			if !errors.Is(err, tc.want) || errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
				t.Fatalf("err = %v, want %v only", err, tc.want)
			}
		})
	}
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
	ctx := ctxT(t)
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
		if string(kv.Value) != "EX\nhost-1" || uint64(kv.CreateRevision) != held[i].Token() {
			t.Fatalf("%q: value %q, create revision %d; want \"EX\\nhost-1\", %d", name, kv.Value, kv.CreateRevision, held[i].Token())
		}
		held[i].Release(ctx)
	}
	// Another prefix is another lock space.
	other := dlm.New(etcd.New(e.raw, etcd.WithPrefix("other/")))
	name := resource(t)
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
	c, _ := e.client()
	ctx := ctxT(t)
	name := resource(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Do(ctx, name, func(context.Context, *dlm.Lease) error { return nil }, dlm.WithTTL(time.Second)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = c.Acquire(wctx, name)
	cancel()
	l.Release(ctx)
	// Waits ended, so their watches and etcd's watch streams are gone.
	await(t, 3*time.Second, "goroutines to settle", func() bool { return goroutines() == 0 })
}

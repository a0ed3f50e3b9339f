package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestInspectHolderAndWaiters(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t) + "/with%/slash"

	if r, err := s.Inspect(ctx, name); err != nil || r.Resource != name || len(r.Holders)+len(r.Waiters) != 0 {
		t.Fatalf("free resource: %+v, %v; want no holders or waiters", r, err)
	}

	holder := request(name, "a")
	holder.Metadata = "leader-1\nline 2"
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, holder, g)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := request(name, "b")
	waiter.Metadata = "candidate-2"
	waited := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, waiter)
		waited <- err
	}()
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == 2 })

	r, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	wantHolder := driver.HolderInfo{Owner: holder.Owner, Mode: driver.EX, Token: g.Token, Metadata: holder.Metadata}
	wantWaiter := driver.WaiterInfo{Owner: waiter.Owner, Mode: driver.EX, Metadata: waiter.Metadata}
	if r.Resource != name || len(r.Holders) != 1 || r.Holders[0] != wantHolder || len(r.Waiters) != 1 || r.Waiters[0] != wantWaiter {
		t.Fatalf("Inspect = %+v, want holder %+v and waiter %+v", r, wantHolder, wantWaiter)
	}
	cancel()
	if err := <-waited; !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("the abandoned wait: %v", err)
	}
}

func TestInspectExactName(t *testing.T) {
	e := newEnv(t)
	_, s := e.client(etcd.WithPrefix(e.dir()))
	ctx := storetest.Context(t)
	// Every name but "a" starts with "a", as a name or as a key.
	names := []string{"a", "a/b", "ab", "a%", "a%2F"}
	tokens := make(map[string]uint64)
	for _, name := range names {
		req := request(name, "c")
		req.Metadata = name
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx, req, g)
		tokens[name] = g.Token
	}
	for _, name := range names {
		r, err := s.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Holders) != 1 || r.Holders[0].Metadata != name || r.Holders[0].Token != tokens[name] || len(r.Waiters) != 0 {
			t.Fatalf("Inspect(%q) = %+v, want its one holder only", name, r)
		}
	}
}

func TestInspectSharedHoldersAndWriter(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var tokens []uint64
	for _, owner := range []string{"a", "b"} {
		req := request(name, owner)
		req.Mode = driver.PR
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx, req, g)
		tokens = append(tokens, g.Token)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.AcquireWait(wctx, request(name, "w")) // ends with the test
	storetest.Await(t, 10*time.Second, "writer queued", func() bool { return len(e.keys(name)) == 3 })
	r, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Holders) != 2 || r.Holders[0].Token != tokens[0] || r.Holders[1].Token != tokens[1] ||
		r.Holders[0].Mode != driver.PR || len(r.Waiters) != 1 || r.Waiters[0].Mode != driver.EX {
		t.Fatalf("Inspect = %+v, want two readers holding and a writer waiting", r)
	}
}

func TestInspectEmptyName(t *testing.T) {
	_, s := newEnv(t).client()
	if _, err := s.Inspect(storetest.Context(t), ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
}

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

func TestWatchSignalsEachChange(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.Watch(wctx, name)
	if err != nil {
		t.Fatal(err)
	}
	req := request(name, "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "grant")
	if err := s.Relabel(ctx, req, g, "new value"); err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "relabel")
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "release")
	cancel()
	storetest.Closes(t, ch, 10*time.Second, "context ended")
}

func TestWatchExactName(t *testing.T) {
	e := newEnv(t)
	_, s := e.client(etcd.WithPrefix(e.dir()))
	ctx := storetest.Context(t)
	ch, err := s.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Changes to names that start with "a", as names or as keys, are
	// followed by one to "b", whose watch shares the client's stream: when
	// "b" is signalled, etcd has sent every earlier event.
	control, err := s.Watch(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b", "ab", "a%", "a%2F", "b"} {
		req := request(name, "c")
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx, req, g)
	}
	storetest.Signalled(t, control, 10*time.Second, "the control resource")
	select {
	case <-ch:
		t.Fatal("the watch of \"a\" was signalled by another resource")
	default:
	}
	req := request("a", "c")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, req, g)
	storetest.Signalled(t, ch, 10*time.Second, "the watched resource")
}

func TestWatchClosedWithTheClient(t *testing.T) {
	e := newEnv(t)
	cli := newClient(t, e.srv)
	s := etcd.New(cli)
	ctx := storetest.Context(t)
	ch, err := s.Watch(ctx, storetest.Resource(t))
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	storetest.Closes(t, ch, 10*time.Second, "client closed")
}

func TestWatchErrors(t *testing.T) {
	_, s := newEnv(t).client()
	ctx := storetest.Context(t)
	if _, err := s.Watch(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Watch(done, "x"); !errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ended context: %v, want context.Canceled", err)
	}
}

// TestElectionCallsWhenDown checks Inspect, Watch and Relabel with etcd
// down, and a watch across the outage.
func TestElectionCallsWhenDown(t *testing.T) {
	e := ownEnv(t)
	_, s := e.client(etcdTimeout)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Kill()
	if _, err := s.Inspect(ctx, name); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Inspect: %v, want ErrUnavailable", err)
	}
	if _, err := s.Watch(ctx, name); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Watch: %v, want ErrUnavailable", err)
	}
	if err := s.Relabel(ctx, req, g, "x"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Relabel: %v, want ErrUnavailable", err)
	}

	// The watch made before resumes once etcd is back.
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.raw.Put(ctx, etcd.DefaultPrefix+escaper.Replace(name)+"/b", "EX\n"); err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "a change after the restart")
}

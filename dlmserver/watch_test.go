package dlmserver_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// watcher reads a store's watch of one resource.
type watcher struct {
	t    *testing.T
	ch   <-chan struct{}
	read *dlmserver.Store // inspects the resource
	name string
}

// await waits for signals until Inspect shows what want accepts: every
// change must be signalled, or the test times out on the channel.
func (w *watcher) await(what string, want func(driver.ResourceInfo) bool) {
	w.t.Helper()
	for {
		storetest.Signalled(w.t, w.ch, 20*time.Second, what)
		r, err := w.read.Inspect(storetest.Context(w.t), w.name)
		if err != nil {
			w.t.Fatal(err)
		}
		if want(r) {
			return
		}
	}
}

// holding accepts a resource held by one lock with metadata.
func holding(metadata string) func(driver.ResourceInfo) bool {
	return func(r driver.ResourceInfo) bool { return len(r.Holders) == 1 && r.Holders[0].Metadata == metadata }
}

// free accepts a resource nobody holds or awaits.
func free(r driver.ResourceInfo) bool { return len(r.Holders) == 0 && len(r.Waiters) == 0 }

// A watch signals each change of its resource as it happens: a grant, a
// relabel, a release, a holder's session closed, and a holder's session
// expired after its process was killed. Watch-then-inspect misses none.
func TestWatch(t *testing.T) {
	ctx := storetest.Context(t)
	s, other := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)
	ch, err := s.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{t: t, ch: ch, read: s, name: name}
	if r, err := s.Inspect(ctx, name); err != nil || !free(r) {
		t.Fatalf("inspect after watch: %+v, %v", r, err)
	}

	req := request(name, driver.EX)
	req.Metadata = "v1"
	g, err := other.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	w.await("grant", holding("v1"))
	if err := other.Relabel(ctx, req, g, "v2"); err != nil {
		t.Fatal(err)
	}
	w.await("relabel", holding("v2"))
	if err := other.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	w.await("release", free)

	// A holder's store closed without releasing: its session ends.
	closing := dial(t, shared.Addr())
	creq := request(name, driver.PR)
	creq.Metadata = "closing"
	if _, err := closing.Acquire(ctx, creq); err != nil {
		t.Fatal(err)
	}
	w.await("grant before the close", holding("closing"))
	if err := closing.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w.await("session closed", free)

	// A holder's process killed: its session expires.
	child := startChild(t, shared.Addr(), name, 2*time.Second) // late keepalives of a loaded machine fit in it
	w.await("the child's grant", func(r driver.ResourceInfo) bool { return len(r.Holders) == 1 && r.Holders[0].SessionLabel == "child" })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.await("session expired", free)
}

// A watch ends with its ctx, or with the store: the channel is closed and
// no goroutine is left.
func TestWatchEnds(t *testing.T) {
	marks := []string{"github.com/dlmhq/dlm/dlmserver.(*Store).Watch", "google.golang.org/grpc.newClientStream"}
	s := dial(t, shared.Addr())
	name := storetest.Resource(t)
	ctx, cancel := context.WithCancel(storetest.Context(t))
	base := storetest.Goroutines(marks...) // the store's session stream
	var chans []<-chan struct{}
	for range 3 {
		ch, err := s.Watch(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if n := storetest.Goroutines(marks...); n < base+3 {
		t.Fatalf("%d goroutines with 3 watches, %d before: the marks do not find them", n, base)
	}
	cancel()
	for i, ch := range chans {
		storetest.Closes(t, ch, 10*time.Second, fmt.Sprintf("watch %d after its ctx ended", i))
	}
	storetest.Await(t, 10*time.Second, "the watches' goroutines to end", func() bool { return storetest.Goroutines(marks...) <= base })

	ch, err := s.Watch(storetest.Context(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	storetest.Closes(t, ch, 10*time.Second, "the store closed")
	storetest.Await(t, 10*time.Second, "the watch's goroutines to end", func() bool { return storetest.Goroutines(marks...) <= base })
	if _, err := s.Watch(storetest.Context(t), name); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("watch on a closed store: %v, want driver.ErrUnavailable", err)
	}
	if _, err := dial(t, shared.Addr()).Watch(storetest.Context(t), ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("watch of no name: %v, want driver.ErrInvalid", err)
	}
}

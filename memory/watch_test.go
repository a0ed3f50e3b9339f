package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/memory"
)

// signals checks the signals of one watch around the changes of a test.
type signals struct {
	t  *testing.T
	ch <-chan struct{}
}

// none fails the test if a signal is pending.
func (g signals) none(what string) {
	g.t.Helper()
	select {
	case _, ok := <-g.ch:
		g.t.Fatalf("%s: a signal (open %v) with no change", what, ok)
	default:
	}
}

// pending fails the test unless a signal is pending now.
func (g signals) pending(what string) {
	g.t.Helper()
	select {
	case _, ok := <-g.ch:
		if !ok {
			g.t.Fatalf("%s: the watch closed", what)
		}
	default:
		g.t.Fatalf("%s: no signal", what)
	}
}

// next waits for the next signal.
func (g signals) next(what string) {
	g.t.Helper()
	select {
	case _, ok := <-g.ch:
		if !ok {
			g.t.Fatalf("%s: the watch closed", what)
		}
	case <-time.After(within):
		g.t.Fatalf("%s: no signal", what)
	}
}

// TestWatchSignalsEveryChange: a grant, a relabel, a request queued, timed
// out or cancelled, a release handing the lock over, a conversion and an
// expiry each signal the resource's watch, and no other resource's.
func TestWatchSignalsEveryChange(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	ch, err := s.Watch(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	och, err := s.Watch(ctx, "r/other")
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := s.Watch(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	w, w2, other := signals{t, ch}, signals{t, ch2}, signals{t, och}
	w.none("a new watch")

	areq := lockReq("r", driver.EX, "")
	a := mustAcquire(t, s, areq)
	w.pending("a grant")
	w2.pending("a grant, for a second watch")
	if err := s.Relabel(ctx, areq, a, "new value"); err != nil {
		t.Fatal(err)
	}
	w.pending("a relabel")

	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = s.AcquireWait(tctx, lockReq("r", driver.EX, ""))
	cancel()
	if !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("timed-out wait = %v", err)
	}
	w.pending("a request queued and timed out")

	cctx, cancel := context.WithCancel(ctx)
	wc := goWait(t, func(context.Context) (driver.Grant, error) { return s.AcquireWait(cctx, lockReq("r", driver.EX, "")) })
	w.next("a request queued")
	cancel()
	if _, err := wc.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait = %v", err)
	}
	w.pending("a request cancelled")

	breq := lockReq("r", driver.EX, "")
	wb := goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, breq) })
	w.next("a request queued")
	if err := s.Release(ctx, areq, a); err != nil {
		t.Fatal(err)
	}
	w.pending("a release handing over")
	b, err := wb.result(t)
	if err != nil {
		t.Fatal(err)
	}
	w.none("the waiter's return")
	if b, err = s.Convert(ctx, breq, b, driver.PR); err != nil {
		t.Fatal(err)
	}
	w.pending("a conversion")
	breq.TTL = time.Millisecond
	if err := s.Extend(ctx, breq, b); err != nil {
		t.Fatal(err)
	}
	w.next("an expiry")
	if info, err := s.Inspect(ctx, "r"); err != nil || len(info.Holders) != 0 {
		t.Fatalf("after the expiry: %+v, %v", info, err)
	}
	other.none("changes of another resource")
}

// TestWatchCoalesces: a watch nobody reads never holds the store back, and
// holds one signal for all the changes.
func TestWatchCoalesces(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	ch, err := s.Watch(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		req := lockReq("r", driver.EX, "")
		g := mustAcquire(t, s, req)
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatal(err)
		}
	}
	w := signals{t, ch}
	w.pending("1000 changes")
	w.none("1000 changes, read once")
}

// TestWatchEndsWithItsContext: a watch's channel closes when its context
// ends; nothing of it stays in the store, and no goroutine.
func TestWatchEndsWithItsContext(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	var chans []<-chan struct{}
	for range 50 {
		ch, err := s.Watch(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if n := s.Watches(); n != 50 {
		t.Fatalf("%d watches, want 50", n)
	}
	cancel()
	for _, ch := range chans {
		storetest.Closes(t, ch, within, "a watch whose context ended")
	}
	if n := s.Watches(); n != 0 {
		t.Fatalf("%d watches left after their context ended", n)
	}
	mustAcquire(t, s, lockReq("r", driver.EX, "")) // signals nobody
	storetest.Await(t, within, "the watches' goroutines to end", func() bool {
		return storetest.Goroutines("github.com/dlmhq/dlm/memory.") == 0
	})
	if _, err := s.Watch(ctx, "r"); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch with an ended context = %v", err)
	}
}

// TestWatchEndsWithTheStore: Close closes every watch; a watch's context
// ending after that is harmless; watching a closed store is unavailable.
func TestWatchEndsWithTheStore(t *testing.T) {
	s := memory.New()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Watch(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	storetest.Closes(t, ch, within, "the watch of a closed store")
	cancel()
	if _, err := s.Watch(t.Context(), "r"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("watch after Close = %v", err)
	}
}

// TestWatchBounds: the number of watches and the name are bounded.
func TestWatchBounds(t *testing.T) {
	s := memory.New(memory.WithMaxWatches(2))
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := s.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(t.Context(), "c"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("a watch past the bound = %v", err)
	}
	cancel()
	storetest.Closes(t, first, within, "the first watch")
	if _, err := s.Watch(t.Context(), "c"); err != nil {
		t.Fatalf("a watch once one ended: %v", err)
	}
	if _, err := s.Watch(t.Context(), ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("a watch of no name = %v", err)
	}
}

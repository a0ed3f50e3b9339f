package dlmserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// request returns a driver request for resource in mode, with a fresh owner.
func request(resource string, mode driver.Mode) driver.Request {
	b := make([]byte, 16)
	rand.Read(b)
	return driver.Request{Resource: resource, Owner: hex.EncodeToString(b), Mode: mode, TTL: time.Minute}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// settled returns once every event the server sent s before now has been
// handled: it makes a round trip on s's stream, whose answer comes after
// them in log order.
func settled(t *testing.T, ctx context.Context, s *dlmserver.Store) {
	t.Helper()
	req := request(storetest.Resource(t), driver.EX)
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
}

// waitFor starts AcquireWait of req on s and returns where its outcome
// comes.
func waitFor(ctx context.Context, s *dlmserver.Store, req driver.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		g, err := s.AcquireWait(ctx, req)
		if err == nil {
			err = s.Release(context.WithoutCancel(ctx), req, g)
		}
		done <- err
	}()
	return done
}

func TestFeatures(t *testing.T) {
	s := dial(t, shared.Addr())
	for _, f := range []driver.Feature{driver.FeatureSemaphores, driver.FeatureBlocking} {
		if !driver.Has(s, f) {
			t.Errorf("feature %b not declared", f)
		}
	}
}

// A request that queues behind a holder closes the holder's Blocking
// channel; a compatible one, granted beside it, does not.
func TestBlockingNotice(t *testing.T) {
	ctx := storetest.Context(t)
	a, b := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)

	holdReq := request(name, driver.PR)
	hold, err := a.Acquire(ctx, holdReq)
	if err != nil {
		t.Fatal(err)
	}
	if hold.Blocking == nil {
		t.Fatal("no Blocking channel with the grant")
	}
	reader := request(name, driver.PR)
	rg, err := b.Acquire(ctx, reader)
	if err != nil {
		t.Fatalf("a compatible reader: %v", err)
	}
	settled(t, ctx, a)
	if closed(hold.Blocking) {
		t.Fatal("a compatible grant closed the holder's Blocking channel")
	}
	if err := b.Release(ctx, reader, rg); err != nil {
		t.Fatal(err)
	}

	writer := waitFor(ctx, b, request(name, driver.EX))
	storetest.Within(t, hold.Blocking, 10*time.Second, "the blocking notice")
	select {
	case err := <-writer:
		t.Fatalf("the writer was not kept waiting: %v", err)
	default:
	}
	if err := a.Release(ctx, holdReq, hold); err != nil {
		t.Fatal(err)
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
}

// A conversion that changes the mode returns a fresh Blocking channel,
// which the server's notice about the new mode closes.
func TestBlockingAfterConversion(t *testing.T) {
	ctx := storetest.Context(t)
	a, b := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)

	req := request(name, driver.PR)
	g, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	writer := waitFor(ctx, b, request(name, driver.PW))
	storetest.Within(t, g.Blocking, 10*time.Second, "the notice to the reader")

	// Down to NL: compatible with the writer, who is granted.
	nl, err := a.Convert(ctx, req, g, driver.NL)
	if err != nil {
		t.Fatal(err)
	}
	if nl.Blocking == g.Blocking {
		t.Fatal("a conversion kept the Blocking channel of the old mode")
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	settled(t, ctx, a)
	if closed(nl.Blocking) {
		t.Fatal("the Blocking channel of NL closed, which blocks nobody")
	}

	// Up to EX: a new reader queues behind it and closes the new channel.
	ex, err := a.Convert(ctx, req, nl, driver.EX)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Blocking == nl.Blocking {
		t.Fatal("a conversion kept the Blocking channel of the old mode")
	}
	reader := waitFor(ctx, b, request(name, driver.CR))
	storetest.Within(t, ex.Blocking, 10*time.Second, "the notice to the converted holder")
	if err := a.Release(ctx, req, ex); err != nil {
		t.Fatal(err)
	}
	if err := <-reader; err != nil {
		t.Fatal(err)
	}
}

// A semaphore holder is told when a request for permits that do not fit
// queues.
func TestBlockingSemaphore(t *testing.T) {
	ctx := storetest.Context(t)
	a, b := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)

	req := request(name, 0)
	req.Capacity, req.Permits = 3, 2
	g, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fits := request(name, 0)
	fits.Capacity, fits.Permits = 3, 1
	fg, err := b.Acquire(ctx, fits)
	if err != nil {
		t.Fatal(err)
	}
	settled(t, ctx, a)
	if closed(g.Blocking) {
		t.Fatal("a request that fitted closed the holder's Blocking channel")
	}
	more := request(name, 0)
	more.Capacity, more.Permits = 3, 2
	waiter := waitFor(ctx, b, more)
	storetest.Within(t, g.Blocking, 10*time.Second, "the notice to the semaphore holder")
	if err := a.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, fits, fg); err != nil {
		t.Fatal(err)
	}
}

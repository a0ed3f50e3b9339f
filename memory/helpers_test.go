package memory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// within bounds the waits for events that must come: generous, so that a
// loaded machine does not fail a test that would pass.
const within = 10 * time.Second

var ownerSeq atomic.Uint64

// newID returns a fresh 32-character owner or group id.
func newID() string { return fmt.Sprintf("%032x", ownerSeq.Add(1)) }

// newStore returns a store closed at the end of the test.
func newStore(t *testing.T) *memory.Store {
	t.Helper()
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// lockReq is a request of a fresh owner for resource in mode, in group
// (none if empty), with a TTL of a minute.
func lockReq(resource string, mode driver.Mode, group string) driver.Request {
	return driver.Request{Resource: resource, Owner: newID(), Mode: mode, TTL: time.Minute, Group: group}
}

// mustAcquire takes req at once or fails the test.
func mustAcquire(t *testing.T, s *memory.Store, req driver.Request) driver.Grant {
	t.Helper()
	g, err := s.Acquire(t.Context(), req)
	if err != nil {
		t.Fatalf("acquire %q: %v", req.Resource, err)
	}
	return g
}

// waitFor is one AcquireWait or Convert running in a goroutine.
type waitFor struct {
	done  chan struct{}
	grant driver.Grant
	err   error
}

// goWait runs f in a goroutine that the test waits for at its end.
func goWait(t *testing.T, f func(ctx context.Context) (driver.Grant, error)) *waitFor {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &waitFor{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.grant, w.err = f(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// result waits for w to end and returns its outcome.
func (w *waitFor) result(t *testing.T) (driver.Grant, error) {
	t.Helper()
	select {
	case <-w.done:
		return w.grant, w.err
	case <-time.After(within):
		t.Fatal("the pending request did not end")
		return driver.Grant{}, nil
	}
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

// watchUntil waits, watching resource, until cond holds: every change of
// the resource is signalled, so cond is checked after each.
func watchUntil(t *testing.T, s *memory.Store, resource string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Watch(ctx, resource)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(within)
	for !cond() {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%q: the awaited state did not come", resource)
		}
	}
}

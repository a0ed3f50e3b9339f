package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// TestInspect: the exact resource, its holder with metadata, token, grant
// time and TTL left, and its waiters; a free resource is no error.
func TestInspect(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if info, err := s.Inspect(ctx, "r"); err != nil || info.Resource != "r" || len(info.Holders)+len(info.Waiters) != 0 {
		t.Fatalf("a free resource = %+v, %v", info, err)
	}
	before := time.Now()
	req := lockReq("r", driver.EX, "")
	req.Metadata = "leader one"
	g := mustAcquire(t, s, req)
	after := time.Now()
	mustAcquire(t, s, lockReq("r/child", driver.EX, ""))
	wreq := lockReq("r", driver.PR, newID())
	wreq.Metadata = "candidate"
	goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, wreq) })
	watchUntil(t, s, "r", func() bool { return s.Waiting("r") == 1 })

	info, err := s.Inspect(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if info.Resource != "r" || len(info.Holders) != 1 || len(info.Waiters) != 1 {
		t.Fatalf("r = %+v, want one holder and one waiter", info)
	}
	h := info.Holders[0]
	if h.Owner != req.Owner || h.Metadata != "leader one" || h.Token != g.Token || h.Mode != driver.EX ||
		h.Since.Before(before.Add(-time.Millisecond)) || h.Since.After(after) || h.TTL <= 0 || h.TTL > time.Minute {
		t.Fatalf("holder = %+v, want %s, its metadata, token %d, granted at the call, TTL left", h, req.Owner, g.Token)
	}
	w := info.Waiters[0]
	if w.Owner != wreq.Owner || w.Metadata != "candidate" || w.Mode != driver.PR || w.Session != wreq.Group || w.Since.IsZero() {
		t.Fatalf("waiter = %+v, want %s in group %s", w, wreq.Owner, wreq.Group)
	}
}

// TestInspectSemaphore: a semaphore's capacity and its holders' permits.
func TestInspectSemaphore(t *testing.T) {
	s := newStore(t)
	mustAcquire(t, s, driver.Request{Resource: "s", Owner: newID(), TTL: time.Minute, Capacity: 3, Permits: 2})
	info, err := s.Inspect(t.Context(), "s")
	if err != nil || info.Capacity != 3 || len(info.Holders) != 1 || info.Holders[0].Permits != 2 {
		t.Fatalf("s = %+v, %v", info, err)
	}
}

// TestRelabel: the holder changes its metadata in place; anyone else, or
// the holder once it let go, is refused with ErrNotHeld.
func TestRelabel(t *testing.T) {
	s := memory.New()
	defer s.Close()
	ctx := t.Context()
	req := lockReq("r", driver.EX, "")
	req.Metadata = "v1"
	g := mustAcquire(t, s, req)
	if err := s.Relabel(ctx, req, g, "v2"); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Inspect(ctx, "r"); info.Holders[0].Metadata != "v2" || info.Holders[0].Token != g.Token {
		t.Fatalf("after relabel: %+v", info.Holders[0])
	}
	if err := s.Relabel(ctx, lockReq("r", driver.EX, ""), g, "v3"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("relabel by another owner = %v", err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "v3"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("relabel after release = %v", err)
	}
	s.Close()
	if err := s.Relabel(ctx, req, g, "v3"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("relabel after Close = %v", err)
	}
	if _, err := s.Inspect(ctx, "r"); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("inspect after Close = %v", err)
	}
}

// TestConvertEndsWhenTheLockExpires: a conversion waiting when its lock's
// TTL runs out ends with ErrNotHeld at once, not at its context's end.
func TestConvertEndsWhenTheLockExpires(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	mustAcquire(t, s, lockReq("r", driver.PR, ""))
	req := lockReq("r", driver.PR, "")
	req.TTL = 50 * time.Millisecond
	g := mustAcquire(t, s, req)
	if _, err := s.Convert(ctx, req, g, driver.EX); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("conversion of an expiring lock = %v, want ErrNotHeld", err)
	}
}

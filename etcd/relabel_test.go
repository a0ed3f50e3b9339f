package etcd_test

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestRelabel(t *testing.T) {
	e := newEnv(t)
	_, s := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	req.Metadata = "first"
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	lease := e.leaseOf(g.Token)
	if err := s.Relabel(ctx, req, g, "second\nline"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "second\nline" || r.Holders[0].Token != g.Token || r.Holders[0].Mode != driver.EX {
		t.Fatalf("after Relabel: %+v, want the new metadata with the same token and mode", r)
	}
	if got := e.leaseOf(g.Token); got != lease {
		t.Fatalf("the key's lease changed from %x to %x", lease, got)
	}
	// Looked up by owner, as a grant without a handle is.
	if err := s.Relabel(ctx, req, driver.Grant{Token: g.Token}, "third"); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, req, g); err != nil {
		t.Fatalf("Extend after Relabel: %v", err)
	}

	// Another owner's grant, and a released one, are not held.
	if err := s.Relabel(ctx, request(name, "b"), driver.Grant{}, "x"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by another owner: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after Release: %v, want ErrNotHeld", err)
	}
	if keys := e.keys(name); len(keys) != 0 {
		t.Fatalf("Relabel after Release created %q", keys)
	}
}

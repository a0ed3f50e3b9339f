package dlmserver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// Relabel changes a held lock's metadata in place: Inspect shows it once
// Relabel returns, with the same token. Too long metadata is refused as at
// acquisition; a released lock is not held.
func TestRelabel(t *testing.T) {
	ctx := storetest.Context(t)
	s, other := dial(t, shared.Addr()), dial(t, shared.Addr())
	name := storetest.Resource(t)
	req := request(name, driver.EX)
	req.Metadata = "term 1 value"
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}

	if err := s.Relabel(ctx, req, g, "new value"); err != nil {
		t.Fatal(err)
	}
	r, err := other.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "new value" || r.Holders[0].Token != g.Token {
		t.Fatalf("after the relabel: %+v, want metadata %q and token %d", r.Holders, "new value", g.Token)
	}

	long := strings.Repeat("m", 1025)
	if err := s.Relabel(ctx, req, g, long); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("relabel with %d bytes: %v, want driver.ErrInvalid", len(long), err)
	}
	long = long[:1024]
	if err := s.Relabel(ctx, req, g, long); err != nil {
		t.Fatalf("relabel with 1024 bytes: %v", err)
	}

	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("relabel of a released lock: %v, want driver.ErrNotHeld", err)
	}
}

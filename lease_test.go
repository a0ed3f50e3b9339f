package dlm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// forgetful is a store that no longer holds any lock when asked to extend.
type forgetful struct{ driver.Driver }

func (forgetful) Extend(context.Context, driver.Request, driver.Grant) error {
	return driver.ErrNotHeld
}

// Lost is closed for a lease lost before anyone asked for the channel, and
// never for a lease released while held.
func TestLostWhetherAskedBeforeOrAfter(t *testing.T) {
	ctx := context.Background()
	c := dlm.New(forgetful{memory.New()})
	lost, err := c.Acquire(ctx, "lost", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := lost.Extend(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Extend = %v, want ErrLost", err)
	}
	select {
	case <-lost.Lost():
	default:
		t.Fatal("Lost of a lease lost before the call is not closed")
	}
	asked, err := c.Acquire(ctx, "asked", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ch := asked.Lost()
	if err := asked.Extend(ctx); !errors.Is(err, dlm.ErrLost) {
		t.Fatalf("Extend = %v, want ErrLost", err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Lost, asked for before the loss, is not closed after it")
	}
	released, err := c.Acquire(ctx, "released", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ch = released.Lost()
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("Lost of a released lease is closed")
	case <-released.Lost():
		t.Fatal("Lost, asked for after the release, is closed")
	default:
	}
}

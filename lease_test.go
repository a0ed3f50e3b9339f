package dlm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
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

// reporting is a store that reports the loss of every grant it makes on
// one channel (lost) or through one context (ctx), as a store whose grants
// share a session does.
type reporting struct {
	driver.Driver
	lost chan struct{}
	ctx  context.Context
}

func (r reporting) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := r.Driver.Acquire(ctx, req)
	if err == nil {
		g.Lost = r.lost
		if r.ctx != nil {
			g.Lost, g.LostContext = r.ctx.Done(), r.ctx
		}
	}
	return g, err
}

// A loss the store reports, on a channel or through a context, ends every
// lease it carried as lost at once, and no released lease. Through a
// context, no goroutine waits for it; on a channel, one per lease does,
// until the lease ends.
func TestStoreReportedLoss(t *testing.T) {
	const watcher = "dlm.(*Lease).watch"
	for _, kind := range []string{"channel", "context"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			st := reporting{Driver: memory.New()}
			var report func() // the store's report of the loss
			if kind == "channel" {
				st.lost = make(chan struct{})
				report = func() { close(st.lost) }
			} else {
				st.ctx, report = context.WithCancel(ctx)
			}
			c := dlm.New(st)
			held, err := c.Acquire(ctx, "held", dlm.WithWait(0))
			if err != nil {
				t.Fatal(err)
			}
			released, err := c.Acquire(ctx, "released", dlm.WithWait(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := released.Release(ctx); err != nil {
				t.Fatal(err)
			}
			want := 0
			if kind == "channel" {
				want = 1 // the held lease's
			}
			storetest.Await(t, 5*time.Second, "the released lease's watcher to end", func() bool { return storetest.Goroutines(watcher) == want })

			report()
			select {
			case <-held.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("the reported loss did not end the held lease")
			}
			if err := held.Err(); !errors.Is(err, dlm.ErrLost) || !strings.Contains(err.Error(), "store reports") {
				t.Fatalf("held.Err() = %v, want the store's report (ErrLost)", err)
			}
			if err := released.Err(); err != nil {
				t.Fatalf("released.Err() = %v after the loss, want nil", err)
			}
			select {
			case <-released.Lost():
				t.Fatal("the loss reported after the release ended the released lease")
			default:
			}
			late, err := c.Acquire(ctx, "late", dlm.WithWait(0))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-late.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("a lease granted after the reported loss is not lost")
			}
			storetest.Await(t, 5*time.Second, "the watchers to end", func() bool { return storetest.Goroutines(watcher) == 0 })
		})
	}
}

package dlm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// memoryClient returns a client over a fresh memory store, and the store.
func memoryClient(t *testing.T) (*dlm.Client, *memory.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	return dlm.New(st), st
}

// next receives the next leader from ch, failing the test if ch closes.
func next(t *testing.T, ch <-chan dlm.Leader) dlm.Leader {
	t.Helper()
	select {
	case ld, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed early")
		}
		return ld
	case <-time.After(30 * time.Second):
		t.Fatal("no leader change delivered within 30 s")
	}
	return dlm.Leader{}
}

func TestElectionCampaignsInOrderAndResignHandsOver(t *testing.T) {
	c, st := memoryClient(t)
	ctx := context.Background()
	e := c.Election("election/orders")
	a, err := e.Campaign(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if a.Value() != "node-a" || a.Term() == 0 {
		t.Fatalf("leadership value %q term %d", a.Value(), a.Term())
	}
	ld, err := e.Leader(ctx)
	if err != nil || ld.Value != "node-a" || ld.Term != a.Term() {
		t.Fatalf("Leader = %+v, %v; want node-a term %d", ld, err, a.Term())
	}

	// Two more candidates queue, b before c.
	type won struct {
		name string
		l    *dlm.Leadership
	}
	wins := make(chan won, 2)
	campaign := func(name string) {
		l, err := e.Campaign(ctx, name)
		if err != nil {
			t.Error(err)
			return
		}
		wins <- won{name, l}
	}
	go campaign("node-b")
	waitQueued(t, st, "election/orders", 1)
	go campaign("node-c")
	waitQueued(t, st, "election/orders", 2)

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	b := <-wins
	if b.name != "node-b" || b.l.Term() <= a.Term() {
		t.Fatalf("after a resigned, %s won with term %d (a had %d); want node-b with a higher term", b.name, b.l.Term(), a.Term())
	}
	if err := b.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cw := <-wins
	if cw.name != "node-c" || cw.l.Term() <= b.l.Term() {
		t.Fatalf("then %s won with term %d (b had %d)", cw.name, cw.l.Term(), b.l.Term())
	}
	if err := cw.l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlm.ErrNoLeader) {
		t.Fatalf("Leader with nobody leading = %v, want ErrNoLeader", err)
	}
}

// waitQueued waits until the memory store shows n waiters on resource,
// reading it again at each change it pushes.
func waitQueued(t *testing.T, st *memory.Store, resource string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changed, err := st.Watch(ctx, resource)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := st.Inspect(ctx, resource)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) >= n {
			return
		}
		if _, ok := <-changed; !ok {
			t.Fatalf("%d waiters on %q after 30 s, want %d", len(info.Waiters), resource, n)
		}
	}
}

func TestElectionObserveDeliversEveryChangeInOrder(t *testing.T) {
	c, _ := memoryClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := c.Election("election/observed")
	obs := e.Observe(ctx)
	if ld := next(t, obs); ld != (dlm.Leader{}) {
		t.Fatalf("first delivery with nobody leading = %+v, want the zero Leader", ld)
	}

	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := next(t, obs); ld.Value != "a" || ld.Term != a.Term() || ld.Since.IsZero() {
		t.Fatalf("after a won: %+v, want a at term %d with Since", ld, a.Term())
	}
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if a.Value() != "a2" {
		t.Fatalf("Value after Proclaim = %q", a.Value())
	}
	if ld := next(t, obs); ld.Value != "a2" || ld.Term != a.Term() {
		t.Fatalf("after Proclaim: %+v, want a2 at the same term %d", ld, a.Term())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ld := next(t, obs); ld != (dlm.Leader{}) {
		t.Fatalf("after Resign: %+v, want nobody", ld)
	}
	b, err := e.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if ld := next(t, obs); ld.Value != "b" || ld.Term != b.Term() || ld.Term <= a.Term() {
		t.Fatalf("after b won: %+v, want b at term %d > %d", ld, b.Term(), a.Term())
	}
	cancel()
	for range obs { // Observe closes its channel once ctx ends
	}
	_ = b.Resign(context.Background())
}

func TestElectionObservePollsAStoreThatCannotPush(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	c := dlm.New(inspectOnly{st})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := c.Election("election/polled", dlm.WithPollInterval(10*time.Millisecond))
	obs := e.Observe(ctx)
	if ld := next(t, obs); ld.Term != 0 {
		t.Fatalf("first delivery %+v, want nobody", ld)
	}
	a, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := next(t, obs); ld.Value != "a" || ld.Term != a.Term() {
		t.Fatalf("polled: %+v, want a at %d", ld, a.Term())
	}
	if err := a.Proclaim(ctx, "x"); !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("Proclaim on a store without Relabel = %v, want ErrUnsupported", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ld := next(t, obs); ld.Term != 0 {
		t.Fatalf("after Resign: %+v, want nobody", ld)
	}
}

// inspectOnly is a memory store seen as a store that can read a lock by
// name but neither push changes nor relabel: what Redlock offers.
type inspectOnly struct{ st *memory.Store }

func (s inspectOnly) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return s.st.Acquire(ctx, req)
}

func (s inspectOnly) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	return s.st.Extend(ctx, req, g)
}

func (s inspectOnly) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	return s.st.Release(ctx, req, g)
}

func (s inspectOnly) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	return s.st.Inspect(ctx, resource)
}

func TestElectionWithoutInspectorSaysUnsupported(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	c := dlm.New(plainStore{st})
	e := c.Election("election/plain")
	if _, err := e.Leader(context.Background()); !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("Leader = %v, want ErrUnsupported", err)
	}
	if _, ok := <-e.Observe(context.Background()); ok {
		t.Fatal("Observe delivered on a store that cannot read a lock")
	}
}

// plainStore is a memory store seen through the bare driver interface.
type plainStore struct{ st *memory.Store }

func (s plainStore) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return s.st.Acquire(ctx, req)
}

func (s plainStore) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	return s.st.Extend(ctx, req, g)
}

func (s plainStore) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	return s.st.Release(ctx, req, g)
}

func TestElectionRefusesBadInput(t *testing.T) {
	c, _ := memoryClient(t)
	ctx := context.Background()
	if _, err := c.Election("").Campaign(ctx, "v"); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
	if _, err := c.Election("").Leader(ctx); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("Leader of an empty name: %v, want ErrInvalid", err)
	}
	long := strings.Repeat("v", dlm.MaxMetadataBytes+1)
	if _, err := c.Election("election/x").Campaign(ctx, long); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("oversized value: %v, want ErrInvalid", err)
	}
	if _, err := c.Election("election/x", dlm.WithPollInterval(0)).Leader(ctx); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("zero poll interval: %v, want ErrInvalid", err)
	}
	l, err := c.Election("election/x").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	if err := l.Proclaim(ctx, long); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("Proclaim of an oversized value: %v, want ErrInvalid", err)
	}
	if err := dlm.RunElection(ctx, dlm.ElectionConfig{Election: c.Election("election/x")}); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("RunElection without work: %v, want ErrInvalid", err)
	}
}

func TestRunElectionStopsTheWorkOnLossAndCampaignsAgain(t *testing.T) {
	c, _ := memoryClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The leadership stops renewing after its maximum hold, so it is lost
	// at its TTL while the work still runs.
	e := c.Election("election/lossy", dlm.WithTTL(50*time.Millisecond), dlm.WithMaxHold(50*time.Millisecond))
	var (
		mu      sync.Mutex
		terms   []uint64
		causes  []error
		stopped int
	)
	done := make(chan error, 1)
	go func() {
		done <- dlm.RunElection(ctx, dlm.ElectionConfig{
			Election: e,
			Value:    "me",
			OnStartedLeading: func(ctx context.Context, l *dlm.Leadership) {
				<-ctx.Done()
				mu.Lock()
				defer mu.Unlock()
				terms = append(terms, l.Term())
				causes = append(causes, context.Cause(ctx))
				if len(terms) == 2 {
					cancel()
				}
			},
			OnStoppedLeading: func() {
				mu.Lock()
				stopped++
				mu.Unlock()
			},
		})
	}()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunElection = %v, want one wrapping context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Fatalf("terms %v: want two leaderships, the second with a higher term", terms)
	}
	if !errors.Is(causes[0], dlm.ErrLost) {
		t.Fatalf("the first work stopped with cause %v, want ErrLost", causes[0])
	}
	if stopped != 2 {
		t.Fatalf("OnStoppedLeading called %d times, want 2", stopped)
	}
}

func TestRunElectionResignsWhenTheWorkIsDone(t *testing.T) {
	c, _ := memoryClient(t)
	ctx := context.Background()
	e := c.Election("election/done")
	seen := make(chan dlm.Leader, 16)
	err := dlm.RunElection(ctx, dlm.ElectionConfig{
		Election: e,
		Value:    "worker",
		OnStartedLeading: func(ctx context.Context, l *dlm.Leadership) {
			// Work until the observer has seen this leadership.
			for ld := range seen {
				if ld.Term == l.Term() && ld.Value == "worker" {
					return
				}
			}
		},
		OnNewLeader: func(ld dlm.Leader) { seen <- ld },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlm.ErrNoLeader) {
		t.Fatalf("after the work returned, Leader = %v, want ErrNoLeader (resigned)", err)
	}
}

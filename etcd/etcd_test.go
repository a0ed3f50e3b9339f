package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestMutualExclusion(t *testing.T) {
	e := newEnv(t)
	c1, _ := e.client()
	c2, _ := e.client()
	name := storetest.MutualExclusion(t, []*dlm.Client{c1, c2}, 16, 10, dlm.WithTTL(5*time.Second))
	if keys := e.keys(name); len(keys) != 0 {
		t.Fatalf("keys left behind: %q", keys)
	}
}

func TestFIFOOrder(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	storetest.FIFOHandoff(t, c, 8, e.waiting)
}

func TestReadersAndWriterInRevisionOrder(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx, cancel := context.WithCancel(storetest.Context(t))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	name := storetest.Resource(t)
	pr := dlm.WithMode(dlm.PR)

	r1, err := c.Acquire(ctx, name, pr, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ctx, name, pr, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	granted := make(chan *dlm.Lease, 2)
	acquire := func(opts ...dlm.Option) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, name, opts...)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			granted <- l
		}()
	}
	acquire() // the writer, behind two readers
	// The writer first tries once (a key created and deleted: a reader that
	// comes then is granted, rightly, ahead of it), then queues; once it is
	// queued, a reader is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		storetest.Await(t, 5*time.Second, "writer queued", func() bool { return len(e.keys(name)) == 3 })
		l, err := c.Acquire(ctx, name, pr, dlm.WithWait(0))
		if errors.Is(err, dlm.ErrNotAcquired) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("a reader behind a waiting writer: err = %v, want ErrNotAcquired", err)
		}
		l.Release(ctx) // it came between the writer's try and its queueing
	}
	acquire(pr) // a reader behind the writer
	storetest.Await(t, 5*time.Second, "reader queued", func() bool { return len(e.keys(name)) == 4 })

	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-granted:
		t.Fatalf("%s granted while a reader still holds", l.Mode())
	case <-time.After(50 * time.Millisecond):
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-granted
	if w == nil || w.Mode() != dlm.EX {
		t.Fatalf("first grant after the readers: %v, want the writer", w)
	}
	select {
	case <-granted:
		t.Fatal("the later reader was granted while the writer holds")
	case <-time.After(100 * time.Millisecond):
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r3 := <-granted
	if r3 == nil || r3.Mode() != dlm.PR || r3.Token() <= w.Token() {
		t.Fatalf("after the writer: %v, want the later reader with a higher token", r3)
	}
	r3.Release(ctx)
}

func TestModeCompatibility(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	modes := []dlm.Mode{dlm.NL, dlm.CR, dlm.CW, dlm.PR, dlm.PW, dlm.EX}
	for _, held := range modes {
		for _, asked := range modes {
			t.Run(fmt.Sprintf("%s-%s", held, asked), func(t *testing.T) {
				name := storetest.Resource(t)
				h, err := c.Acquire(ctx, name, dlm.WithMode(held), dlm.WithWait(0))
				if err != nil {
					t.Fatal(err)
				}
				defer h.Release(ctx)
				l, err := c.Acquire(ctx, name, dlm.WithMode(asked), dlm.WithWait(0))
				switch want := asked.Compatible(held); {
				case want && err != nil:
					t.Fatalf("%s while %s is held: %v, want granted", asked, held, err)
				case !want && !errors.Is(err, dlm.ErrNotAcquired):
					t.Fatalf("%s while %s is held: %v, want ErrNotAcquired", asked, held, err)
				case want:
					l.Release(ctx)
				}
			})
		}
	}
	// The general rule: a request waits for the last earlier request it
	// conflicts with, granted or not. CR is compatible with a held PW but
	// not with a queued EX.
	name := storetest.Resource(t)
	pw, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PW))
	if err != nil {
		t.Fatal(err)
	}
	cr, err := c.Acquire(ctx, name, dlm.WithMode(dlm.CR), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("CR beside PW: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ex, err := c.Acquire(ctx, name, dlm.WithWait(5*time.Second))
		if err != nil {
			t.Error(err)
			return
		}
		ex.Release(ctx)
	}()
	// The EX first tries once (a key created and deleted: a CR that comes
	// then is granted, rightly, ahead of it), then queues; once it is
	// queued, a CR is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		storetest.Await(t, 5*time.Second, "EX queued", func() bool { return len(e.keys(name)) == 3 })
		l, err := c.Acquire(ctx, name, dlm.WithMode(dlm.CR), dlm.WithWait(0))
		if errors.Is(err, dlm.ErrNotAcquired) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("CR behind a queued EX: %v, want ErrNotAcquired", err)
		}
		l.Release(ctx) // it came between the EX's try and its queueing
	}
	pw.Release(ctx)
	cr.Release(ctx)
	storetest.Within(t, done, 5*time.Second, "EX after PW and CR")
}

func TestWaiterAheadLeaves(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan int, 3)
	var inside atomic.Int32
	var wg sync.WaitGroup
	leave, cancel := context.WithCancel(ctx)
	for i, wctx := range []context.Context{ctx, leave, ctx} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(wctx, name)
			if err != nil {
				if i != 1 {
					t.Error(err)
				}
				return
			}
			if inside.Add(1) != 1 {
				t.Errorf("waiter %d granted while another holds", i)
			}
			granted <- i
			time.Sleep(20 * time.Millisecond)
			inside.Add(-1)
			l.Release(ctx)
		}()
		storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return len(e.keys(name)) == i+2 })
	}
	// The last waiter's predecessor leaves: it must now wait for the first.
	cancel()
	storetest.Await(t, 5*time.Second, "waiter gone", func() bool { return len(e.keys(name)) == 3 })
	select {
	case i := <-granted:
		t.Fatalf("waiter %d granted while the lock is held", i)
	case <-time.After(50 * time.Millisecond):
	}
	holder.Release(ctx)
	wg.Wait()
	close(granted)
	var order []int
	for i := range granted {
		order = append(order, i)
	}
	if len(order) != 2 || order[0] != 0 || order[1] != 2 {
		t.Fatalf("grant order %v, want [0 2]", order)
	}
}

func TestElection(t *testing.T) {
	c, _ := newEnv(t).client()
	storetest.Election(t, c, true)
}

func TestLeaseBlocking(t *testing.T) {
	c, _ := newEnv(t).client()
	storetest.Blocking(t, c, true)
}

func TestCancellation(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	checker, _ := e.client()
	storetest.Cancellation(t, c, checker, storetest.Cancels{Elections: true})
}

package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

// SharedReadersExclusiveWriter checks protected reads (PR) against an
// exclusive writer (EX) on a fresh resource, for stores with both modes.
// Two readers hold it together (holding(resource), if not nil, counts 2
// granted locks in the store), a writer's try-lock is refused, and a
// writer that waits queues (waiting(resource), which counts queued
// requests and conversions, is 1). No barging: a reader's try-lock is then
// refused, and a reader that waits queues behind the writer (waiting is
// 2). When one reader leaves the writer still waits. If convert is true,
// the last reader, alone, converts to EX and back to PR, both at once,
// ahead of the queue. When the last reader leaves the writer is granted,
// with a token above the readers', and the queued reader is not granted
// while the writer holds; after the writer it is, with a token above the
// writer's, and can extend its shared lock. The checks that a grant did
// not happen look for 50 ms as well as at the store's queue.
func SharedReadersExclusiveWriter(t *testing.T, c *dlm.Client, waiting, holding func(resource string) int, convert bool) {
	t.Helper()
	ctx := Context(t)
	name := Resource(t)
	read := func() *dlm.Lease {
		t.Helper()
		l, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR), dlm.WithWait(0))
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		return l
	}
	r1, r2 := read(), read()
	if holding != nil && holding(name) != 2 {
		t.Fatalf("the store shows %d holders, want the two readers", holding(name))
	}
	if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("writer try-lock under readers = %v, want ErrNotAcquired", err)
	}

	type got struct {
		l   *dlm.Lease
		err error
	}
	writer, reader := make(chan got, 1), make(chan got, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		writer <- got{l, err}
	}()
	Await(t, 10*time.Second, "writer queued", func() bool { return waiting(name) == 1 })
	if _, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR), dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("reader try-lock past a queued writer = %v, want ErrNotAcquired", err)
	}
	go func() {
		l, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR))
		reader <- got{l, err}
	}()
	Await(t, 10*time.Second, "late reader queued", func() bool { return waiting(name) == 2 })

	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-writer:
		t.Fatalf("writer granted while a reader holds the lock (%v)", g.err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := waiting(name); n != 2 {
		t.Fatalf("%d waiting after one reader left, want the writer and the late reader", n)
	}
	if convert {
		if err := r2.Convert(ctx, dlm.EX); err != nil {
			t.Fatalf("PR->EX with no other holder: %v", err)
		}
		if r2.Mode() != dlm.EX {
			t.Fatalf("mode after conversion = %v", r2.Mode())
		}
		if err := r2.Convert(ctx, dlm.PR); err != nil {
			t.Fatalf("EX->PR: %v", err)
		}
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-writer
	if w.err != nil {
		t.Fatal(w.err)
	}
	select {
	case g := <-reader:
		t.Fatalf("reader granted while the writer holds the lock (%v)", g.err)
	case <-time.After(50 * time.Millisecond):
	}
	if n := waiting(name); n != 1 {
		t.Fatalf("%d waiting while the writer holds, want the late reader", n)
	}
	if w.l.Token() <= max(r1.Token(), r2.Token()) {
		t.Fatalf("writer token %d is not above the readers' %d, %d", w.l.Token(), r1.Token(), r2.Token())
	}
	if err := w.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-reader
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() <= w.l.Token() {
		t.Fatalf("reader token %d is not above the writer's %d", r.l.Token(), w.l.Token())
	}
	if err := r.l.Extend(ctx); err != nil {
		t.Fatalf("Extend of a shared lock: %v", err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

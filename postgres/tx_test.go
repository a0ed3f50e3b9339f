package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestLockTx(t *testing.T) {
	e := newEnv(t)
	pool := e.pool(8)
	s := newStore(t, pool)
	c := dlm.New(s)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	begin := func() pgx.Tx {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		return tx
	}

	tx1 := begin()
	tok1, err := s.LockTx(ctx, tx1, name, dlm.EX)
	if err != nil {
		t.Fatal(err)
	}
	// Transaction and session locks on one resource exclude each other.
	if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("session try-lock under a transaction lock = %v, want ErrNotAcquired", err)
	}
	tx2 := begin()
	if _, ok, err := s.TryLockTx(ctx, tx2, name, dlm.PR); err != nil || ok {
		t.Fatalf("TryLockTx under another transaction's lock = %v, %v; want false, nil", ok, err)
	}

	// A waiting LockTx is granted when the holder's transaction ends.
	tx3 := begin()
	type got struct {
		token uint64
		err   error
	}
	waited := make(chan got, 1)
	go func() {
		tok, err := s.LockTx(ctx, tx3, name, dlm.PR)
		waited <- got{tok, err}
	}()
	storetest.Await(t, 5*time.Second, "LockTx queued", func() bool { return e.locks(name, false) == 1 })
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-waited
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.token <= tok1 {
		t.Fatalf("token %d is not above the previous holder's %d", g.token, tok1)
	}
	// Shared with another reader, then gone with the transaction.
	tok4, ok, err := s.TryLockTx(ctx, tx2, name, dlm.PR)
	if err != nil || !ok || tok4 <= g.token {
		t.Fatalf("second reader: %d, %v, %v; want a larger token", tok4, ok, err)
	}
	if err := tx3.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("lock still held after the transactions ended: %v", err)
	}
	if l.Token() <= tok4 {
		t.Fatalf("session token %d is not above the transaction's %d", l.Token(), tok4)
	}
	l.Release(ctx)

	// A wait bounded by the context ends the transaction, and leaves
	// nothing queued.
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tx5 := begin()
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.LockTx(wctx, tx5, name, dlm.EX)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockTx past its context = %v, want DeadlineExceeded", err)
	}
	holder.Release(ctx)
	storetest.Await(t, 5*time.Second, "the abandoned wait to leave the queue", func() bool {
		return e.locks(name, false)+e.locks(name, true) == 0
	})
}

func TestLockTxBadInput(t *testing.T) {
	e := newEnv(t)
	pool := e.pool(2)
	s := newStore(t, pool)
	ctx := storetest.Context(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	cases := []struct {
		name     string
		tx       pgx.Tx
		resource string
		mode     dlm.Mode
		want     error
	}{
		{"nil transaction", nil, "r", dlm.EX, dlm.ErrInvalid},
		{"empty name", tx, "", dlm.EX, dlm.ErrInvalid},
		{"invalid UTF-8", tx, "a\xffb", dlm.EX, dlm.ErrInvalid},
		{"no mode", tx, "r", 0, dlm.ErrInvalid},
		{"unsupported mode", tx, "r", dlm.PW, dlm.ErrUnsupported},
	}
	for _, tc := range cases {
		if _, err := s.LockTx(ctx, tc.tx, tc.resource, tc.mode); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// The transaction is untouched by rejected calls.
	if _, ok, err := s.TryLockTx(ctx, tx, storetest.Resource(t), dlm.EX); err != nil || !ok {
		t.Fatalf("TryLockTx after rejected calls = %v, %v", ok, err)
	}
}

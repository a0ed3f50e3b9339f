package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlmhq/dlm/internal/testenv"
)

// Statements of a shared session that share a transaction: when one fails,
// those before it are answered once a barrier transaction committed, those
// after it, which the server skipped, run once each, on their own, and a
// statement the server would not prepare gets the reason.
func TestRoundTransactionFails(t *testing.T) {
	p := testenv.StartPostgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	connect := func() *pgx.Conn { return connectTB(ctx, t, p) }
	admin := connect()
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SEQUENCE round_test"); err != nil {
		t.Fatal(err)
	}
	const (
		value   = "SELECT $1::int8"
		divide  = "SELECT 1 / $1::int8"
		next    = "SELECT nextval('round_test')"
		missing = "SELECT nextval('no_such_sequence')"
	)
	s, err := openSession(ctx, connect(), map[string]bool{value: true, divide: true, next: true, missing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	// oneRound sends calls in one round and waits for their answers.
	oneRound := func(t *testing.T, calls ...*call) {
		t.Helper()
		s.mu.Lock()
		if s.owned {
			s.mu.Unlock()
			t.Fatal("the session is busy")
		}
		s.owned = true // as a caller running its own round
		s.mu.Unlock()
		for _, c := range calls {
			if s.admit(c, false) != admitQueued {
				t.Fatalf("%s was not queued", c.sql)
			}
		}
		s.release() // run takes the queue, as one round
		for _, c := range calls {
			select {
			case <-c.done:
			case <-ctx.Done():
				t.Fatalf("%s: no answer", c.sql)
			}
		}
	}
	newCallOf := func(t *testing.T, sql string, args ...any) *call {
		t.Helper()
		c, err := newCall(sql, args, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	answer := func(t *testing.T, c *call) int64 {
		t.Helper()
		var v *int64
		if c.err != nil {
			t.Fatalf("%s: %v", c.sql, c.err)
		}
		if err := scanRow(c.vals, &v); err != nil || v == nil {
			t.Fatalf("%s: %v, %v", c.sql, v, err)
		}
		return *v
	}
	wantCode := func(t *testing.T, c *call, code string) {
		t.Helper()
		var pgErr *pgconn.PgError
		if !errors.As(c.err, &pgErr) || pgErr.Code != code {
			t.Fatalf("%s: err = %v, want SQLSTATE %s", c.sql, c.err, code)
		}
	}
	xid := func(t *testing.T) (x uint64) {
		t.Helper()
		if err := admin.QueryRow(ctx, "SELECT pg_current_xact_id()::text::int8").Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}

	// Prepared first, so that no Parse, which has a Sync of its own, splits
	// the transactions below.
	oneRound(t, newCallOf(t, value, int64(0)), newCallOf(t, divide, int64(1)), newCallOf(t, next))

	t.Run("answers", func(t *testing.T) {
		// Nothing here takes a transaction id but the barrier, which
		// commits the log of the statements that ran before the failure.
		before := xid(t)
		calls := []*call{newCallOf(t, value, int64(1)), newCallOf(t, value, int64(2)), newCallOf(t, divide, int64(0)), newCallOf(t, value, int64(4)), newCallOf(t, value, int64(5))}
		oneRound(t, calls...)
		wantCode(t, calls[2], "22012")
		for _, i := range []int{0, 1, 3, 4} {
			if v := answer(t, calls[i]); v != int64(i+1) {
				t.Errorf("call %d answered %d", i, v)
			}
		}
		if n := xid(t) - before - 1; n != 1 {
			t.Errorf("%d transactions with an id between two of the test's, want 1 (the barrier)", n)
		}
	})

	t.Run("skipped run once", func(t *testing.T) {
		calls := []*call{newCallOf(t, next), newCallOf(t, divide, int64(0)), newCallOf(t, next), newCallOf(t, next)}
		oneRound(t, calls...)
		wantCode(t, calls[1], "22012")
		first := answer(t, calls[0])
		if a, b := answer(t, calls[2]), answer(t, calls[3]); a != first+1 || b != first+2 {
			t.Errorf("tokens %d, then %d and %d after the failure: want the next two, in order", first, a, b)
		}
		var last int64
		if err := admin.QueryRow(ctx, "SELECT last_value FROM round_test").Scan(&last); err != nil {
			t.Fatal(err)
		}
		if last != first+2 {
			t.Errorf("the sequence is at %d, want %d: a skipped statement ran twice", last, first+2)
		}
	})

	t.Run("refused", func(t *testing.T) {
		calls := []*call{newCallOf(t, value, int64(1)), newCallOf(t, missing), newCallOf(t, value, int64(3))}
		oneRound(t, calls...)
		wantCode(t, calls[1], "42P01") // the reason, not the absent prepared statement
		if a, b := answer(t, calls[0]), answer(t, calls[2]); a != 1 || b != 3 {
			t.Errorf("answers %d and %d beside the refused statement, want 1 and 3", a, b)
		}
	})

	if err := s.ended(); err != nil {
		t.Fatalf("the session ended: %v", err)
	}
}

// connectTB opens a pgx connection to p, failing tb when it cannot.
func connectTB(ctx context.Context, tb testing.TB, p *testenv.Postgres) *pgx.Conn {
	tb.Helper()
	c, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

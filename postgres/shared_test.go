package postgres_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/postgres"
)

// holders returns the backends that hold resource.
func (e *env) holders(resource string) []string {
	e.t.Helper()
	return e.pids(postgres.KeyOf(resource), true)
}

func TestSharedSessionHoldsManyLocks(t *testing.T) {
	e := newEnv(t)
	p := e.pool(4)
	s := newStore(t, p, postgres.WithSessions(1))
	ctx := storetest.Context(t)
	base := storetest.Resource(t)
	var pid string
	for i := range 20 {
		name := base + "/" + strconv.Itoa(i)
		g, err := s.Acquire(ctx, request(name, "a"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Release(context.Background(), request(name, "a"), g) })
		h := e.holders(name)
		if len(h) != 1 || (pid != "" && h[0] != pid) {
			t.Fatalf("lock %d held by backends %v, want the one shared session %s", i, h, pid)
		}
		pid = h[0]
	}
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("20 locks keep %d connections out of the pool, want none", n)
	}
}

// acquireRelease takes req on s without waiting and releases it.
func acquireRelease(t *testing.T, s *postgres.Store, req driver.Request, what string) {
	t.Helper()
	ctx := storetest.Context(t)
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatalf("%s: release: %v", what, err)
	}
}

// connsWhileHeld takes req on s without waiting, counts the connections
// out of p while it holds it, and releases it.
func connsWhileHeld(t *testing.T, s *postgres.Store, p *pgxpool.Pool, req driver.Request) int32 {
	t.Helper()
	ctx := storetest.Context(t)
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	n := p.Stat().AcquiredConns()
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSameKeyTwiceInOneStore(t *testing.T) {
	e := newEnv(t)
	p := e.pool(4)
	s := newStore(t, p, postgres.WithSessions(1))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	// PostgreSQL grants a session a lock it holds already: the second
	// request must not reach the session that holds the first.
	a := request(name, "a")
	ga, err := s.Acquire(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, request(name, "b")); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("second owner in the same store: %v, want ErrTaken", err)
	}
	// Shared readers: the second reader holds on a session of its own.
	rd := request(name+"/read", "c")
	rd.Mode = driver.PR
	rd2 := request(name+"/read", "d")
	rd2.Mode = driver.PR
	g1, err := s.Acquire(ctx, rd)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := s.Acquire(ctx, rd2)
	if err != nil {
		t.Fatal(err)
	}
	if h := e.holders(name + "/read"); len(h) != 2 || h[0] == h[1] {
		t.Fatalf("two readers held by backends %v, want two", h)
	}
	if err := s.Release(ctx, rd, g1); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, rd2, g2); err != nil {
		t.Fatalf("the other reader after the first released: %v", err)
	}
	w := request(name+"/read", "e")
	if _, err := s.Acquire(ctx, w); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("writer beside a reader: %v, want ErrTaken", err)
	}
	if err := s.Release(ctx, rd2, g2); err != nil {
		t.Fatal(err)
	}
	gw, err := s.Acquire(ctx, w)
	if err != nil {
		t.Fatalf("writer after both readers released: %v", err)
	}
	if err := s.Release(ctx, w, gw); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a, ga); err != nil {
		t.Fatal(err)
	}
	// The key's place was given up: the next lock is on the shared
	// session again, not on a connection of the pool.
	if n := connsWhileHeld(t, s, p, request(name, "b")); n != 0 {
		t.Fatalf("the key's next lock holds %d connections of the pool, want it on the shared session", n)
	}
}

func TestSharedSessionEndLosesItsLocks(t *testing.T) {
	e := newEnv(t)
	s := newStore(t, e.pool(4), postgres.WithSessions(1))
	ctx := storetest.Context(t)
	base := storetest.Resource(t)
	var reqs []driver.Request
	var grants []driver.Grant
	for i := range 3 {
		req := request(base+"/"+strconv.Itoa(i), "a")
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		reqs, grants = append(reqs, req), append(grants, g)
	}
	if n := e.terminate(reqs[0].Resource); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	for i, req := range reqs {
		if err := s.Extend(ctx, req, grants[i]); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("lock %d after its session ended: Extend = %v, want ErrNotHeld", i, err)
		}
		if err := s.Release(ctx, req, grants[i]); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("lock %d after its session ended: Release = %v, want ErrNotHeld", i, err)
		}
	}
	// A new session takes the locks.
	for _, req := range reqs {
		req.Owner = request("", "b").Owner
		acquireRelease(t, s, req, "after the session ended")
	}
	// Close waits for the ended session's goroutine as for the new one's.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A goroutine is still returning for a moment after it closed done.
	storetest.Await(t, 10*time.Second, "no session goroutine left after Close", func() bool {
		return storetest.Goroutines("github.com/dlmhq/dlm/postgres.(*session)") == 0
	})
}

func TestCloseEndsSharedSessions(t *testing.T) {
	e := newEnv(t)
	s := postgres.New(e.pool(4))
	ctx := storetest.Context(t)
	req := request(storetest.Resource(t), "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, req, g); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Extend after Close = %v, want ErrNotHeld", err)
	}
	storetest.Await(t, 10*time.Second, "the server to free the lock", func() bool { return e.locks(req.Resource, true) == 0 })
	if _, err := s.Acquire(ctx, request(req.Resource, "b")); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Acquire after Close = %v, want ErrUnavailable", err)
	}
	if _, err := s.AcquireWait(ctx, request(req.Resource, "b")); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("AcquireWait after Close = %v, want ErrUnavailable", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSessionsOption(t *testing.T) {
	e := newEnv(t)
	p := e.pool(4)
	for _, n := range []int{-1, postgres.MaxSessions + 1} {
		if _, err := newStore(t, p, postgres.WithSessions(n)).Acquire(context.Background(), request("x", "a")); !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("WithSessions(%d): %v, want ErrInvalid", n, err)
		}
	}
	// Without shared sessions every lock keeps a connection of its own.
	s := newStore(t, p, postgres.WithSessions(0))
	req := request(storetest.Resource(t), "a")
	if n := connsWhileHeld(t, s, p, req); n != 1 {
		t.Fatalf("%d connections out of the pool, want the lock's", n)
	}
}

func TestAbandonedSharedGrantIsUnlocked(t *testing.T) {
	e := newEnv(t)
	s := newStore(t, e.pool(4), postgres.WithSessions(1))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	req.Metadata = "first"
	g, err := s.Acquire(ctx, req) // sets the store up, holder table included
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	// Hold the holder table, so that the next grant with metadata waits in
	// the server, and give up on it meanwhile.
	tx, err := e.admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE "+postgres.DefaultTable+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		b := request(name, "b")
		b.Metadata = "second"
		_, err := s.Acquire(actx, b)
		done <- err
	}()
	storetest.Await(t, 10*time.Second, "the grant to wait for the table", func() bool {
		var n int
		err := e.admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'relation' AND relation = $1::regclass AND NOT granted`, postgres.DefaultTable).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned acquisition = %v, want context.Canceled", err)
	}
	// The caller read its own statement's answer and left mid-read; the
	// session reads on. A statement sent meanwhile waits for that round,
	// then runs.
	other := request(name+"/other", "d")
	next := make(chan error, 1)
	go func() {
		g, err := s.Acquire(ctx, other)
		if err == nil {
			err = s.Release(ctx, other, g)
		}
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("a statement behind the blocked round finished before it: %v", err)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatalf("the statement queued behind the abandoned round: %v", err)
	}
	// The statement ran, and the session unlocked what nobody holds.
	storetest.Await(t, 10*time.Second, "the abandoned grant to be unlocked", func() bool { return e.locks(name, true) == 0 })
	acquireRelease(t, s, request(name, "c"), "after the abandoned grant")
}

// Callers that give up at any moment, while others run their statements on
// the same session, leave nothing held: a caller that leaves mid-read hands
// its round to the session, which settles it, and the statements queued
// behind it run.
func TestSharedSessionCallersGiveUpAnyTime(t *testing.T) {
	e := newEnv(t)
	s := newStore(t, e.pool(4), postgres.WithSessions(1))
	ctx := storetest.Context(t)
	base := storetest.Resource(t)
	// A lock held throughout: the session must outlive the callers that
	// left mid-read.
	anchor := request(base+"/anchor", "a")
	ga, err := s.Acquire(ctx, anchor)
	if err != nil {
		t.Fatal(err)
	}
	const callers, cycles = 8, 40
	errs := make(chan error, callers)
	for c := range callers {
		go func() {
			req := request(base+"/"+strconv.Itoa(c), strconv.Itoa(c))
			var err error
			for i := range cycles {
				actx, cancel := context.WithCancel(ctx)
				// Cancel at once, after a yield, or never: the call ends
				// before, during or after its statement.
				switch i % 3 {
				case 0:
					cancel()
				case 1:
					go cancel()
				}
				g, aerr := s.Acquire(actx, req)
				cancel()
				switch {
				case aerr == nil:
					err = s.Release(ctx, req, g)
				case errors.Is(aerr, context.Canceled), errors.Is(aerr, driver.ErrTaken):
					// An abandoned grant holds the key until the
					// session has unlocked it.
				default:
					err = aerr
				}
				if err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for c := range callers {
		name := base + "/" + strconv.Itoa(c)
		storetest.Await(t, 10*time.Second, "every abandoned grant to be unlocked", func() bool { return e.locks(name, true) == 0 })
		acquireRelease(t, s, request(name, "z"), "after the callers gave up")
	}
	if err := s.Extend(ctx, anchor, ga); err != nil {
		t.Fatalf("the lock held throughout: %v (did the shared session end?)", err)
	}
	if err := s.Release(ctx, anchor, ga); err != nil {
		t.Fatal(err)
	}
}

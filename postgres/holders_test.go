package postgres_test

import (
	"context"
	"errors"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/postgres"
)

// request returns a driver request as package dlm would make it.
func request(name, owner string) driver.Request {
	return driver.Request{Resource: name, Owner: strings.Repeat(owner, 32)[:32], Mode: driver.EX, TTL: 10 * time.Second}
}

// store returns a store on a pool of its own.
func (e *env) store(opts ...postgres.Option) (*postgres.Store, *pgxpool.Pool) {
	e.t.Helper()
	p := e.pool(8)
	return newStore(e.t, p, opts...), p
}

// rows counts the rows of resource in the default holder table.
func (e *env) rows(resource string) int {
	e.t.Helper()
	var n int
	err := e.admin.QueryRow(context.Background(), `SELECT count(*) FROM dlm_holders WHERE lock_key = $1`,
		postgres.KeyOf(resource)).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// now returns the server's clock.
func (e *env) now() time.Time {
	e.t.Helper()
	var t time.Time
	if err := e.admin.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&t); err != nil {
		e.t.Fatal(err)
	}
	return t
}

// inspect fails the test unless Inspect succeeds.
func inspect(t *testing.T, s *postgres.Store, name string) driver.ResourceInfo {
	t.Helper()
	r, err := s.Inspect(storetest.Context(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if r.Resource != name {
		t.Fatalf("Inspect(%q) named %q", name, r.Resource)
	}
	return r
}

func TestAcquireRecordsMetadata(t *testing.T) {
	e := newEnv(t)
	s, pool := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	key := postgres.KeyOf(name)
	if r := inspect(t, s, name); len(r.Holders)+len(r.Waiters) != 0 {
		t.Fatalf("free resource: %+v", r)
	}

	before := e.now()
	holder := request(name, "a")
	holder.Metadata = "leader-1\nline 2"
	g, err := s.Acquire(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	if g.Blocking != nil || driver.Has(s, driver.FeatureBlocking) {
		t.Fatal("the store cannot see its waiters, yet it offers Blocking")
	}
	after := e.now()
	r := inspect(t, s, name)
	if len(r.Holders) != 1 || len(r.Waiters) != 0 {
		t.Fatalf("Inspect = %+v, want one holder", r)
	}
	h := r.Holders[0]
	if h.Owner != e.pids(key, true)[0] || h.Mode != driver.EX || h.Token != g.Token || h.Metadata != holder.Metadata {
		t.Fatalf("holder = %+v, want the backend's pid, EX, token %d and the metadata", h, g.Token)
	}
	if h.Since.Before(before) || h.Since.After(after) {
		t.Fatalf("Since %s is not between %s and %s", h.Since, before, after)
	}

	// A waiter, with metadata too, is shown without.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := request(name, "b")
	waiter.Metadata = "candidate"
	granted := make(chan driver.Grant, 1)
	go func() {
		g, err := s.AcquireWait(wctx, waiter)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	storetest.Await(t, 10*time.Second, "waiter queued", func() bool { return e.waiting(name) == 1 })
	r = inspect(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Metadata != holder.Metadata || len(r.Waiters) != 1 ||
		r.Waiters[0].Owner != e.pids(key, false)[0] || r.Waiters[0].Mode != driver.EX || r.Waiters[0].Metadata != "" {
		t.Fatalf("Inspect = %+v, want the holder and a waiter without metadata", r)
	}

	// Released, the holder's row goes with its lock; the waiter's grant
	// records its own, from the moment it was granted.
	released := e.now()
	if err := s.Release(ctx, holder, g); err != nil {
		t.Fatal(err)
	}
	g2 := <-granted
	r = inspect(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Metadata != waiter.Metadata || r.Holders[0].Token != g2.Token ||
		r.Holders[0].Since.Before(released) || len(r.Waiters) != 0 {
		t.Fatalf("after the handoff: %+v, want the waiter holding, since after %s", r, released)
	}
	if n := e.rows(name); n != 1 {
		t.Fatalf("%d rows, want the new holder's only", n)
	}
	if err := s.Release(ctx, waiter, g2); err != nil {
		t.Fatal(err)
	}
	if n := e.rows(name); n != 0 {
		t.Fatalf("%d rows left after every release", n)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

func TestAcquireWithoutMetadataWritesNothing(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, req, g)
	if n := e.rows(name); n != 0 {
		t.Fatalf("%d rows written for a grant without metadata", n)
	}
	r := inspect(t, s, name)
	want := driver.HolderInfo{Owner: e.pids(postgres.KeyOf(name), true)[0], Mode: driver.EX}
	if len(r.Holders) != 1 || r.Holders[0] != want {
		t.Fatalf("Inspect = %+v, want a holder %+v with no token, metadata or time", r, want)
	}
}

func TestCampaignThroughClient(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	c := dlm.New(s)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(ctx, name, dlm.WithMetadata("value-1"))
	if err != nil {
		t.Fatal(err)
	}
	r := inspect(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "value-1" || r.Holders[0].Token != l.Token() {
		t.Fatalf("Inspect = %+v, want the value and token %d", r, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := inspect(t, s, name); len(r.Holders) != 0 || e.rows(name) != 0 {
		t.Fatalf("after Release: %+v, %d rows", r, e.rows(name))
	}
}

func TestRelabel(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Relabel(ctx, req, g, "v1"); err != nil {
		t.Fatal(err)
	}
	r := inspect(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "v1" || r.Holders[0].Token != g.Token || r.Holders[0].Since.IsZero() {
		t.Fatalf("after Relabel: %+v, want v1 with token %d and a time", r, g.Token)
	}
	since := r.Holders[0].Since
	if err := s.Relabel(ctx, req, g, "v2"); err != nil {
		t.Fatal(err)
	}
	r = inspect(t, s, name)
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "v2" || !r.Holders[0].Since.Equal(since) {
		t.Fatalf("after a second Relabel: %+v, want v2 since %s", r, since)
	}
	if err := s.Extend(ctx, req, g); err != nil {
		t.Fatalf("Extend after Relabel: %v", err)
	}

	// Another owner's grant, a released one, and one whose session ended
	// are not held.
	if err := s.Relabel(ctx, request(name, "b"), g, "x"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel by another owner: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	if n := e.rows(name); n != 0 {
		t.Fatalf("%d rows left by Release", n)
	}
	if err := s.Relabel(ctx, req, g, "late"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after Release: %v, want ErrNotHeld", err)
	}
	g, err = s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.terminate(name); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	if err := s.Relabel(ctx, req, g, "gone"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Relabel after the session ended: %v, want ErrNotHeld", err)
	}
	if n := e.rows(name); n != 0 {
		t.Fatalf("%d rows written by a session that had ended", n)
	}
}

func TestStaleRowsNeverShown(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	key := postgres.KeyOf(name)

	// A holder whose session ends leaves its row behind.
	first := request(name, "a")
	first.Metadata = "dead leader"
	g1, err := s.Acquire(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.terminate(name); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	defer s.Release(ctx, first, g1) // ErrNotHeld; closes the connection
	storetest.Await(t, 10*time.Second, "the lock freed", func() bool { return e.locks(name, true) == 0 })
	if r := inspect(t, s, name); len(r.Holders) != 0 || e.rows(name) != 1 {
		t.Fatalf("Inspect = %+v with %d rows, want no holder and the stale row", r, e.rows(name))
	}

	// A new holder without a row, and a row of its pid from an earlier
	// backend (as when the pid is reused): neither stale row shows.
	second := request(name, "b")
	g, err := s.Acquire(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.pids(key, true)[0]
	if _, err := e.admin.Exec(ctx, `INSERT INTO dlm_holders VALUES ($1, $2, 1, 'earlier backend', '2000-01-01')`, key, pid); err != nil {
		t.Fatal(err)
	}
	r := inspect(t, s, name)
	want := driver.HolderInfo{Owner: pid, Mode: driver.EX}
	if len(r.Holders) != 1 || r.Holders[0] != want {
		t.Fatalf("Inspect = %+v, want holder %+v, without the stale rows' metadata", r, want)
	}

	// The new holder's row replaces its pid's and deletes the others.
	if err := s.Relabel(ctx, second, g, "live leader"); err != nil {
		t.Fatal(err)
	}
	if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "live leader" || e.rows(name) != 1 {
		t.Fatalf("after Relabel: %+v with %d rows, want the live row only", r, e.rows(name))
	}
	if err := s.Release(ctx, second, g); err != nil {
		t.Fatal(err)
	}

	// So does a grant with metadata.
	if _, err := e.admin.Exec(ctx, `INSERT INTO dlm_holders VALUES ($1, 1, 1, 'stale', now())`, key); err != nil {
		t.Fatal(err)
	}
	third := request(name, "c")
	third.Metadata = "next leader"
	g, err = s.Acquire(ctx, third)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, third, g)
	if r := inspect(t, s, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "next leader" || e.rows(name) != 1 {
		t.Fatalf("after a grant with metadata: %+v with %d rows, want the live row only", r, e.rows(name))
	}
}

func TestInspectSharedHolders(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	var tokens []uint64
	for _, owner := range []string{"a", "b"} {
		req := request(name, owner)
		req.Mode, req.Metadata = driver.PR, "reader "+owner
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release(ctx, req, g)
		tokens = append(tokens, g.Token)
	}
	r := inspect(t, s, name)
	if len(r.Holders) != 2 {
		t.Fatalf("Inspect = %+v, want two readers", r)
	}
	pids := e.pids(postgres.KeyOf(name), true) // in pid order, as the holders
	byMeta := map[string]uint64{"reader a": tokens[0], "reader b": tokens[1]}
	for i, h := range r.Holders {
		if h.Mode != driver.PR || h.Owner != pids[i] || byMeta[h.Metadata] != h.Token || h.Token == 0 {
			t.Fatalf("holder %d = %+v, want a reader with its own row", i, h)
		}
	}
}

func TestInspectFromAnotherRole(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	role := "observer_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := e.admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.admin.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role) })
	if _, err := e.admin.Exec(ctx, `GRANT SELECT ON dlm_holders TO `+role); err != nil {
		t.Fatal(err)
	}
	req := request(name, "a")
	req.Metadata = "leader"
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, req, g)

	cfg, err := pgxpool.ParseConfig(strings.Replace(e.srv.DSN(), "postgres@", role+"@", 1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closePool(t, p)
	// The observer may not see the holder's backend start: it matches by
	// pid.
	var hidden bool
	err = p.QueryRow(ctx, `SELECT backend_start IS NULL FROM pg_stat_get_activity($1::int)`, e.pids(postgres.KeyOf(name), true)[0]).Scan(&hidden)
	if err != nil || !hidden {
		t.Fatalf("the holder's backend start is visible to another role (%v): the test does not test the fallback", err)
	}
	r, err := newStore(t, p, postgres.WithSetup(false)).Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Holders) != 1 || r.Holders[0].Metadata != "leader" || r.Holders[0].Token != g.Token {
		t.Fatalf("Inspect by another role = %+v, want the holder's row", r)
	}
}

func TestHolderTableOptions(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)

	// Without a table: metadata is not kept, Relabel is unsupported.
	off, _ := e.store(postgres.WithTable(""))
	req := request(name, "a")
	req.Metadata = "ignored"
	g, err := off.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := inspect(t, off, name); len(r.Holders) != 1 || r.Holders[0].Metadata != "" || r.Holders[0].Token != 0 || e.rows(name) != 0 {
		t.Fatalf("without a table: %+v, %d rows", r, e.rows(name))
	}
	if err := off.Relabel(ctx, req, g, "x"); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("Relabel without a table: %v, want ErrUnsupported", err)
	}
	if err := off.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}

	// Without setup and without the table, a grant with metadata fails as
	// a whole, naming the table, and leaves no lock behind.
	missing := "missing_holders_" + path.Base(name)
	bare, _ := e.store(postgres.WithSetup(false), postgres.WithTable(missing))
	if _, err := bare.Acquire(ctx, req); !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want ErrUnavailable naming the table", err)
	}
	if n := e.locks(name, true); n != 0 {
		t.Fatalf("%d locks left by a failed grant", n)
	}

	// A schema-qualified name, created by setup.
	if _, err := e.admin.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "lock space"`); err != nil {
		t.Fatal(err)
	}
	named, _ := e.store(postgres.WithTable(`lock space.Holders "q"`))
	g, err = named.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer named.Release(ctx, req, g)
	var meta string
	if err := e.admin.QueryRow(ctx, `SELECT metadata FROM "lock space"."Holders ""q""" WHERE lock_key = $1`, postgres.KeyOf(name)).Scan(&meta); err != nil || meta != "ignored" {
		t.Fatalf("row in the named table: %q, %v", meta, err)
	}

	for _, bad := range []postgres.Option{postgres.WithTable("a.b.c"), postgres.WithWatchInterval(0)} {
		s, _ := e.store(bad)
		if _, err := s.Inspect(ctx, name); !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("bad option: %v, want ErrInvalid", err)
		}
	}
	if _, err := named.Inspect(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("empty name: %v, want ErrInvalid", err)
	}
}

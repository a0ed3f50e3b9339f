package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/postgres"
)

// shared is the server of every test that neither kills nor restarts it.
var shared *testenv.Postgres

func TestMain(m *testing.M) {
	pg, err := testenv.NewPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "postgres tests:", err)
		os.Exit(1)
	}
	shared = pg
	code := m.Run()
	pg.Stop()
	os.Exit(code)
}

// env is one test's server and a pool for inspecting it.
type env struct {
	t     testing.TB
	srv   *testenv.Postgres
	admin *pgxpool.Pool
}

// newEnv returns an env on the shared server.
func newEnv(t testing.TB) *env { return envOn(t, shared) }

// ownEnv returns an env on a server of the test's own, to kill or restart.
func ownEnv(t testing.TB) *env { return envOn(t, testenv.StartPostgres(t)) }

func envOn(t testing.TB, srv *testenv.Postgres) *env {
	t.Helper()
	e := &env{t: t, srv: srv}
	e.admin = e.pool(4)
	return e
}

// pool returns a pool of at most n connections, closed when the test ends.
func (e *env) pool(n int32) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.srv.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.MaxConns = n
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { closePool(e.t, p) })
	return p
}

// closePool closes p, which waits for every connection to come back; a
// lease a failed test left held would block it, so give up after a while.
func closePool(t testing.TB, p *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		p.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("pool still has %d connections out after 5s", p.Stat().AcquiredConns())
	}
}

// client returns a dlm client over a store on a pool of its own.
func (e *env) client(opts ...postgres.Option) (*dlm.Client, *pgxpool.Pool) {
	e.t.Helper()
	p := e.pool(24)
	return dlm.New(postgres.New(p, opts...)), p
}

// locks counts the advisory locks on resource in pg_locks, granted or
// waiting.
func (e *env) locks(resource string, granted bool) int {
	e.t.Helper()
	key := postgres.KeyOf(resource)
	var n int
	err := e.admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND classid = $1 AND objid = $2 AND granted = $3`,
		uint32(uint64(key)>>32), uint32(key), granted).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// terminate ends the sessions holding resource, as an administrator's
// pg_terminate_backend would.
func (e *env) terminate(resource string) int {
	e.t.Helper()
	key := postgres.KeyOf(resource)
	var n int
	err := e.admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND classid = $1 AND objid = $2 AND granted`,
		uint32(uint64(key)>>32), uint32(key)).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

var resourceSeq atomic.Int64

// resource returns a name unique to this test run.
func resource(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), resourceSeq.Add(1))
}

// within fails the test if ch is not closed within d.
func within(t testing.TB, ch <-chan struct{}, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
		return 0
	}
}

// await polls cond every few milliseconds until it holds or d passes. It is
// used only for state inside PostgreSQL (pg_locks), which offers no event
// to wait on.
func await(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

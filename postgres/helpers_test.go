package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/postgres"
)

// shared is the server of every test that neither kills nor restarts it.
var shared *testenv.Postgres

func TestMain(m *testing.M) { storetest.Main(m, &shared, testenv.NewPostgres) }

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
	return dlm.New(newStore(e.t, p, opts...)), p
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

// waiting returns how many requests wait for resource in pg_locks.
func (e *env) waiting(resource string) int { return e.locks(resource, false) }

// noWaiters fails the test if a request still waits for resource.
func (e *env) noWaiters(resource string) {
	e.t.Helper()
	if n := e.waiting(resource); n != 0 {
		e.t.Fatalf("%d waiters left in pg_locks", n)
	}
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

// newStore returns postgres.New(p, opts...), closed when the test ends.
func newStore(t testing.TB, p *pgxpool.Pool, opts ...postgres.Option) *postgres.Store {
	s := postgres.New(p, opts...)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

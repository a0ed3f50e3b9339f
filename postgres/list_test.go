package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/postgres"
)

// appClient returns a dlm client and its store over a pool of its own whose
// connections carry the application name app.
func (e *env) appClient(app string) (*dlm.Client, *postgres.Store) {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.srv.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { closePool(e.t, p) })
	s := newStore(e.t, p)
	return dlm.New(s), s
}

// pids returns the backends that hold (granted) or wait for key, by
// pg_locks, in pid order.
func (e *env) pids(key int64, granted bool) []string {
	e.t.Helper()
	rows, err := e.admin.Query(context.Background(), `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND classid = $1 AND objid = $2 AND granted = $3 ORDER BY pid`,
		uint32(uint64(key)>>32), uint32(key), granted)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, strconv.Itoa(int(pid)))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func TestListHolderAndWaitersInOrder(t *testing.T) {
	e := newEnv(t)
	hc, s := e.appClient("list-holder")
	wc, _ := e.appClient("list-waiter")
	name := storetest.Resource(t)
	key := postgres.KeyOf(name)
	var waiters []string
	storetest.ListQueue(t, storetest.ListedQueue{
		Holder: hc, Waiters: wc, Lister: s, Resource: name,
		// Listed by the advisory key, the pid of a backend as the owner,
		// the application name as the metadata, no tokens or TTLs.
		Shown: func(name string) string { return postgres.Key(postgres.KeyOf(name)) },
		Since: true,
		CheckHolder: func(t *testing.T, h driver.HolderInfo, _ *dlm.Lease) {
			want := driver.HolderInfo{Owner: e.pids(key, true)[0], Mode: driver.EX, Metadata: "list-holder"}
			if h != want {
				t.Fatalf("holder = %+v, want %+v", h, want)
			}
		},
		CheckWaiter: func(t *testing.T, i int, w driver.WaiterInfo) {
			if w.Metadata != "list-waiter" {
				t.Fatalf("waiter = %+v, want the metadata %q", w, "list-waiter")
			}
			if since := time.Since(w.Since); since < 0 || since > time.Minute {
				t.Fatalf("waiter since %s, %s ago", w.Since, since)
			}
			waiters = append(waiters, w.Owner)
			if i == storetest.ListQueueWaiters-1 {
				if got := e.pids(key, false); !slices.Equal(got, slices.Sorted(slices.Values(waiters))) {
					t.Fatalf("pg_locks shows the waiters %q, the listing %q", got, waiters)
				}
			}
		},
	})
}

func TestListSharedHoldersAndWriter(t *testing.T) {
	e := newEnv(t)
	c, s := e.appClient("list-modes")
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	key := postgres.KeyOf(name)
	for range 2 {
		l, err := c.Acquire(ctx, name, dlm.WithMode(dlm.PR), dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	writer := make(chan *dlm.Lease, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, _ := c.Acquire(wctx, name) // ends with the test
		writer <- l
	}()
	var r driver.ResourceInfo
	storetest.Await(t, 10*time.Second, "writer queued", func() bool {
		r, _ = storetest.Listed(t, s, postgres.Key(key))
		return len(r.Waiters) == 1
	})
	holders := e.pids(key, true)
	if len(r.Holders) != 2 || r.Holders[0].Owner != holders[0] || r.Holders[1].Owner != holders[1] ||
		r.Holders[0].Mode != driver.PR || r.Holders[1].Mode != driver.PR || r.Waiters[0].Mode != driver.EX {
		t.Fatalf("listing = %+v, want PR holders %q and an EX waiter", r, holders)
	}
	cancel()
	if l := <-writer; l != nil {
		t.Fatal("the writer was granted beside readers")
	}
}

func TestListPrefixLimitAndForeignLocks(t *testing.T) {
	e := newEnv(t)
	c, s := e.appClient("list-prefix")
	ctx := storetest.Context(t)
	const base = 7400000100
	var want []string
	for _, n := range []int64{base + 3, base + 1, base + 2} {
		l, err := c.Acquire(ctx, postgres.Key(n), dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		want = append(want, postgres.Key(n))
	}
	hashed := storetest.Resource(t)
	l, err := c.Acquire(ctx, hashed, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// Locks that other code holds in the same database: one on a 64-bit
	// key shows, one on two 32-bit keys does not.
	conn, err := e.admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SELECT pg_advisory_lock(%d), pg_advisory_lock(74, 1)", base+5)); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
	want = append(want, postgres.Key(base+5))
	slices.Sort(want)

	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"pgkey:74000001", 100, want},
		{"pgkey:74000001", 2, want[:2]},
		{postgres.Key(base + 1), 100, want[:1]},
		{"pgkey:74000002", 100, nil},
	} {
		if got := storetest.Names(storetest.List(t, s, tc.prefix, tc.limit)); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
	all := storetest.Names(storetest.List(t, s, "", 1000))
	if !slices.IsSorted(all) || !slices.Contains(all, postgres.Key(postgres.KeyOf(hashed))) || !slices.Contains(all, want[0]) {
		t.Fatalf("List all = %q, want sorted names with %s and %s", all, postgres.Key(postgres.KeyOf(hashed)), want[0])
	}
	if names := storetest.Names(storetest.List(t, s, "pgkey:", 1000)); !slices.Equal(names, all) {
		t.Fatalf("List(%q) = %q, want every lock %q", "pgkey:", names, all)
	}
	if _, err := s.List(ctx, hashed, 10); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("List by a name prefix: %v, want ErrUnsupported", err)
	}
}

func TestListErrors(t *testing.T) {
	e := newEnv(t)
	_, s := e.appClient("list-errors")
	storetest.ListErrors(t, s, func() driver.Lister {
		// A server that is not there.
		cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", testenv.FreePort(t)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return newStore(t, p)
	})
	if _, err := newStore(t, nil).List(context.Background(), "", 10); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("nil pool: %v, want ErrInvalid", err)
	}
}

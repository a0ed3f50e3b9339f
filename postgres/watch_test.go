package postgres_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/postgres"
)

// noSignal fails the test if ch holds a signal now.
func noSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: signalled", what)
	default:
	}
}

func TestChannel(t *testing.T) {
	valid := regexp.MustCompile(`^dlm_[0-9a-f]{16}$`)
	seen := make(map[string]string)
	for _, name := range []string{"a", "b", "a/b", "pgkey:0", "pgkey:1", "pgkey:-1", "é"} {
		ch := postgres.Channel(name)
		if !valid.MatchString(ch) {
			t.Fatalf("Channel(%q) = %q, want dlm_ and 16 hex digits", name, ch)
		}
		if other, dup := seen[ch]; dup {
			t.Fatalf("%q and %q share channel %q", name, other, ch)
		}
		seen[ch] = name
	}
	if got := postgres.Channel("pgkey:1"); got != "dlm_0000000000000001" {
		t.Fatalf("Channel(pgkey:1) = %q", got)
	}
}

func TestWatchNotify(t *testing.T) {
	e := newEnv(t)
	p := e.pool(4)
	// An interval that does not come during the test: only notifications
	// signal.
	s := newStore(t, p, postgres.WithWatchInterval(time.Hour))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.Watch(wctx, name)
	if err != nil {
		t.Fatal(err)
	}
	noSignal(t, ch, "a new watch")
	if err := s.Notify(ctx, name); err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "Notify")
	// A NOTIFY by any session, on the channel.
	if _, err := e.admin.Exec(ctx, `NOTIFY `+postgres.Channel(name)); err != nil {
		t.Fatal(err)
	}
	storetest.Signalled(t, ch, 10*time.Second, "NOTIFY by another session")
	total := p.Stat().TotalConns()
	cancel()
	storetest.Closes(t, ch, 10*time.Second, "context ended")
	storetest.Await(t, 10*time.Second, "the connection back in the pool", func() bool { return p.Stat().AcquiredConns() == 0 })
	// Given back, not closed, and listening no more.
	if n := p.Stat().TotalConns(); n != total {
		t.Fatalf("%d connections in the pool, want %d: the watch's given back", n, total)
	}
	for _, c := range p.AcquireAllIdle(ctx) {
		var channels int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_listening_channels()`).Scan(&channels)
		c.Release()
		if err != nil || channels != 0 {
			t.Fatalf("a connection given back listens on %d channels (%v)", channels, err)
		}
	}
}

func TestWatchSignalsEveryInterval(t *testing.T) {
	e := newEnv(t)
	s := newStore(t, e.pool(2), postgres.WithWatchInterval(20*time.Millisecond))
	ctx := storetest.Context(t)
	ch, err := s.Watch(ctx, storetest.Resource(t))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody notifies: the interval alone signals, again and again.
	for range 3 {
		storetest.Signalled(t, ch, 10*time.Second, "the interval")
	}
}

func TestWatchSeesAVanishedHolder(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store(postgres.WithWatchInterval(50 * time.Millisecond))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	req := request(name, "a")
	req.Metadata = "leader"
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(ctx, req, g) // ErrNotHeld; closes the connection
	ch, err := s.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's session ends without a word; a watcher that reads the
	// resource at each signal sees it go.
	if n := e.terminate(name); n != 1 {
		t.Fatalf("terminated %d backends, want 1", n)
	}
	for {
		storetest.Signalled(t, ch, 10*time.Second, "the interval")
		if r := inspect(t, s, name); len(r.Holders) == 0 {
			break
		}
	}
}

func TestWatchClosedWhenItsConnectionFails(t *testing.T) {
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(e.srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "dlm-watch-test"
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closePool(t, p)
	s := newStore(t, p, postgres.WithWatchInterval(time.Hour))
	ctx := storetest.Context(t)
	ch, err := s.Watch(ctx, storetest.Resource(t))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'dlm-watch-test'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d backends (%v), want the watch's", n, err)
	}
	storetest.Closes(t, ch, 10*time.Second, "connection terminated")
	storetest.Await(t, 10*time.Second, "the dead connection out of the pool", func() bool { return p.Stat().TotalConns() == 0 })
}

func TestWatchErrors(t *testing.T) {
	e := newEnv(t)
	s, _ := e.store()
	ctx := storetest.Context(t)
	if _, err := s.Watch(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("Watch of an empty name: %v, want ErrInvalid", err)
	}
	if err := s.Notify(ctx, ""); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("Notify of an empty name: %v, want ErrInvalid", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Watch(done, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with an ended context: %v, want context.Canceled", err)
	}
}

func TestWatchNoGoroutineLeak(t *testing.T) {
	e := newEnv(t)
	p := e.pool(4)
	s := newStore(t, p, postgres.WithWatchInterval(time.Millisecond))
	ctx := storetest.Context(t)
	for range 5 {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := s.Watch(wctx, storetest.Resource(t))
		if err != nil {
			t.Fatal(err)
		}
		storetest.Signalled(t, ch, 10*time.Second, "the interval")
		cancel()
		storetest.Closes(t, ch, 10*time.Second, "context ended")
	}
	storetest.Await(t, 10*time.Second, "goroutines to settle", func() bool {
		return storetest.Goroutines("github.com/dlmhq/dlm/postgres.") == 0
	})
	if n := p.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still out of the pool", n)
	}
}

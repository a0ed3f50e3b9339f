package dlm_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/memory"
	"github.com/dlmhq/dlm/postgres"
	"github.com/dlmhq/dlm/redis"
)

// never tells "never" from "late" in these tests; nothing here should come
// near it.
const never = 20 * time.Second

// closedAddr returns a loopback address where nothing listens: a port
// that was listened on and closed.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentAddr returns the address of a server that is up but never answers.
func silentAddr(t *testing.T) string { return testenv.SilentAddr(t) }

// downRedis returns a Redis store whose server is down.
func downRedis(t *testing.T) driver.Driver {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: closedAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	st := redis.New(rdb)
	t.Cleanup(func() { st.Close(); rdb.Close() })
	return st
}

// logRecords collects the records logged to it.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// at returns the messages logged at level.
func (l *logRecords) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msgs []string
	for _, r := range l.records {
		if r.Level == level {
			msgs = append(msgs, r.Message)
		}
	}
	return msgs
}

// acquireDown runs one Acquire on c under a context that ends only after
// never, and returns its error and the number of Warn records logged.
func acquireDown(t *testing.T, c *dlm.Client, opts ...dlm.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), never)
	defer cancel()
	l, err := c.Acquire(ctx, "job", opts...)
	if err == nil {
		l.Release(context.Background())
		t.Fatal("acquired a lock from a store that is down")
	}
	if ctx.Err() != nil {
		t.Fatalf("still waiting after %s: %v", never, err)
	}
	return err
}

func TestAcquireGivesUpOnAnUnreachableStore(t *testing.T) {
	logs := &logRecords{}
	c := dlm.New(downRedis(t), dlm.WithLogger(slog.New(logs)))
	err := acquireDown(t, c, dlm.WithUnavailableTimeout(300*time.Millisecond), dlm.WithRetry(dlm.LinearBackoff(5*time.Millisecond)))
	if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrUnavailable alone", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v: the call's context did not end it", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v does not wrap the store's last error (connection refused)", err)
	}
	msg := err.Error()
	for _, want := range []string{"redis", "unreachable for 300ms", "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if n := strings.Count(msg, dlm.ErrUnavailable.Error()); n != 1 {
		t.Errorf("error %q says %q %d times", msg, dlm.ErrUnavailable, n)
	}
	// Many attempts ran (5 ms apart for 300 ms); one line said so.
	if warns := logs.at(slog.LevelWarn); len(warns) != 1 || !strings.Contains(warns[0], "retrying") {
		t.Fatalf("warnings %q, want one that says the store is unreachable and that it retries", warns)
	}
}

func TestUnavailableTimeoutPerClientAndPerCall(t *testing.T) {
	c := dlm.New(downRedis(t), dlm.WithDefaults(dlm.WithUnavailableTimeout(200*time.Millisecond)))
	if err := acquireDown(t, c); !errors.Is(err, dlm.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable for 200ms") {
		t.Fatalf("client default: err = %v", err)
	}
	err := acquireDown(t, c, dlm.WithUnavailableTimeout(300*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || !strings.Contains(err.Error(), "unreachable for 300ms") {
		t.Fatalf("per call: err = %v", err)
	}
	// Do gives up the same way, without running its function.
	ctx, cancel := context.WithTimeout(t.Context(), never)
	defer cancel()
	err = c.Do(ctx, "job", func(context.Context, *dlm.Lease) error {
		t.Error("Do ran its function without the lock")
		return nil
	})
	if !errors.Is(err, dlm.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("Do: err = %v (context: %v)", err, ctx.Err())
	}
}

func TestUnavailableTimeoutZeroMakesOneAttempt(t *testing.T) {
	logs := &logRecords{}
	d := &countingDriver{Driver: downRedis(t)}
	c := dlm.New(d, dlm.WithLogger(slog.New(logs)))
	err := acquireDown(t, c, dlm.WithUnavailableTimeout(0))
	if !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := d.acquires.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	if warns := logs.at(slog.LevelWarn); len(warns) != 0 {
		t.Fatalf("warned %q about retries that did not happen", warns)
	}
}

func TestUnavailableTimeoutNegativeWaitsForTheContext(t *testing.T) {
	c := dlm.New(downRedis(t))
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, "job", dlm.WithUnavailableTimeout(-1), dlm.WithRetry(dlm.LinearBackoff(5*time.Millisecond)))
	if !errors.Is(err, dlm.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable joined with the context's end", err)
	}
}

func TestContextEndsTheWaitForAnUnreachableStore(t *testing.T) {
	c := dlm.New(downRedis(t))
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "job", dlm.WithUnavailableTimeout(time.Hour))
		res <- err
	}()
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want it to match context.Canceled", err)
		}
	case <-time.After(never):
		t.Fatal("a cancelled call still waits for the store")
	}
}

// TestUnavailableTimeoutBoundsASilentStore: PostgreSQL queues natively,
// and its wait would block for as long as a server that accepts and never
// answers keeps the connection open.
func TestUnavailableTimeoutBoundsASilentStore(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://dlm@" + silentAddr(t) + "/dlm?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := dlm.New(postgres.New(pool))
	err = acquireDown(t, c, dlm.WithUnavailableTimeout(500*time.Millisecond))
	if !errors.Is(err, dlm.ErrUnavailable) || !strings.Contains(err.Error(), "postgres store was unreachable for 500ms") {
		t.Fatalf("err = %v", err)
	}
}

func TestContentionIsNotUnavailability(t *testing.T) {
	st := memory.New()
	defer st.Close()
	c := dlm.New(st)
	ctx := t.Context()
	held, err := c.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	for _, native := range []bool{true, false} {
		var d driver.Driver = st
		if !native {
			d = polled{st}
		}
		c := dlm.New(d)
		_, err := c.Acquire(ctx, "job", dlm.WithUnavailableTimeout(20*time.Millisecond), dlm.WithWait(300*time.Millisecond),
			dlm.WithRetry(dlm.LinearBackoff(time.Millisecond)))
		if !errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrUnavailable) {
			t.Fatalf("native %v: err = %v, want ErrNotAcquired", native, err)
		}
	}
}

// TestUnavailableTimeoutRestartsWhenTheStoreAnswers: the bound is on
// continuous unavailability. A store that answers "taken" between
// failures, more often than the bound, is waited for however long it takes.
func TestUnavailableTimeoutRestartsWhenTheStoreAnswers(t *testing.T) {
	const bound = time.Second
	d := &flakyDriver{Driver: downRedis(t), answerEvery: 50 * time.Millisecond, grantAfter: 3 * bound}
	c := dlm.New(d)
	ctx, cancel := context.WithTimeout(t.Context(), never)
	defer cancel()
	d.start = time.Now()
	l, err := c.Acquire(ctx, "job", dlm.WithUnavailableTimeout(bound), dlm.WithRetry(dlm.LinearBackoff(5*time.Millisecond)))
	if err != nil {
		t.Fatalf("err = %v after %s; answers came every %s", err, time.Since(d.start), d.answerEvery)
	}
	if d.taken.Load() == 0 || d.failed.Load() == 0 {
		t.Fatalf("%d taken and %d failed attempts: the test did not alternate", d.taken.Load(), d.failed.Load())
	}
	l.Release(ctx)
}

// countingDriver counts the attempts made on its store.
type countingDriver struct {
	driver.Driver
	acquires atomic.Int64
}

func (d *countingDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	d.acquires.Add(1)
	return d.Driver.Acquire(ctx, req)
}

// polled hides a store's native wait, so that it is polled.
type polled struct{ driver.Driver }

// flakyDriver is a store that is down (its Driver's attempts fail), except
// that it answers "taken" whenever answerEvery has passed since its last
// answer, and grants once grantAfter has passed since start.
type flakyDriver struct {
	driver.Driver
	answerEvery, grantAfter time.Duration
	start                   time.Time
	mu                      sync.Mutex
	last                    time.Time
	taken, failed           atomic.Int64
}

func (d *flakyDriver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if now.Sub(d.start) >= d.grantAfter {
		return driver.Grant{Token: 1}, nil
	}
	if d.last.IsZero() || now.Sub(d.last) >= d.answerEvery {
		d.last = now
		d.taken.Add(1)
		return driver.Grant{}, driver.ErrTaken
	}
	_, err := d.Driver.Acquire(ctx, req)
	d.failed.Add(1)
	if err == nil {
		return driver.Grant{}, errors.New("the down store granted")
	}
	return driver.Grant{}, err
}

func (d *flakyDriver) Release(context.Context, driver.Request, driver.Grant) error { return nil }

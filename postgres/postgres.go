package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
)

// Defaults of the store's options.
const (
	// DefaultSequence is the name of the fence sequence when WithSequence
	// is not given.
	DefaultSequence = "dlm_fence"
	// DefaultTable is the name of the holder table when WithTable is not
	// given.
	DefaultTable = "dlm_holders"
	// DefaultWatchInterval is how often a Watch signals when
	// WithWatchInterval is not given.
	DefaultWatchInterval = time.Second
	// DefaultSessions is the number of shared sessions when WithSessions
	// is not given.
	DefaultSessions = 2
	// MaxSessions is the most shared sessions WithSessions accepts.
	MaxSessions = 64
)

// cleanupTimeout bounds the statements and closes the store runs on its own
// behalf after a caller's context has ended.
const cleanupTimeout = 2 * time.Second

// Store is a dlm store over a PostgreSQL database. It implements
// driver.Driver, driver.Waiter, driver.Lister, driver.Inspector,
// driver.Relabeler, driver.Watcher and driver.Notifier. It is safe for
// concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	sequence    string // as given
	table       string // as given; "" for none
	setup       bool
	poolerCheck bool
	interval    time.Duration // of Watch
	sessions    int           // as given
	shared      *shared       // nil without shared sessions
	clock       alarm.Clock   // the granted locks' expiries
	sql         map[driver.Mode]*modeSQL
	holders     *holderSQL // nil without a holder table
	createSQL   string
	bad         error // a configuration error reported by every call

	setupDone atomic.Bool
	setupSem  chan struct{} // one setup at a time, bounded by contexts
}

var (
	_ driver.Driver = (*Store)(nil)
	_ driver.Waiter = (*Store)(nil)
	_ driver.Namer  = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithSequence sets the name of the fence sequence, optionally
// schema-qualified ("locks.fence"); the default is "dlm_fence" in the
// session's search path.
func WithSequence(name string) Option { return func(s *Store) { s.sequence = name } }

// WithTable sets the name of the holder table, optionally schema-qualified
// ("locks.holders"), which keeps the token, metadata and time of grants
// (see the package documentation); the default is "dlm_holders" in the
// session's search path. The empty name turns the table off: acquisitions
// then write nothing beside the lock, Relabel is driver.ErrUnsupported,
// and Inspect shows holders without token, metadata or time.
func WithTable(name string) Option { return func(s *Store) { s.table = name } }

// WithSetup sets whether the store creates the fence sequence and the
// holder table (CREATE ... IF NOT EXISTS) before its first lock; the
// default is true. Turn it off when migrations create them or the role may
// not create objects.
func WithSetup(on bool) Option { return func(s *Store) { s.setup = on } }

// WithWatchInterval sets how often a Watch signals even when nobody
// announced a change, the bound on how late a watcher sees a holder whose
// session ended without a word (a crash, a lost connection); the default
// is 1 s. It must be positive.
func WithWatchInterval(d time.Duration) Option { return func(s *Store) { s.interval = d } }

// WithPoolerCheck sets whether a grant first checks that the connection
// reaches PostgreSQL directly (see the package documentation); the default
// is true. Turn it off only behind a pooler in session mode.
func WithPoolerCheck(on bool) Option { return func(s *Store) { s.poolerCheck = on } }

// WithSessions sets the number of shared sessions, connections whose
// server sessions hold the locks of many leases at once (see the package
// documentation); the default is DefaultSessions, at most MaxSessions. Zero
// turns them off: every lock then holds a connection of the pool until it
// is released.
func WithSessions(n int) Option { return func(s *Store) { s.sessions = n } }

// New returns a store that takes its connections from pool. Call Close
// when done with it, before closing the pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{
		pool:        pool,
		sequence:    DefaultSequence,
		table:       DefaultTable,
		setup:       true,
		poolerCheck: true,
		interval:    DefaultWatchInterval,
		sessions:    DefaultSessions,
		setupSem:    make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(s)
	}
	seq, err := qualifiedIdent("sequence", s.sequence)
	var table string
	if err == nil && s.table != "" {
		table, err = qualifiedIdent("table", s.table)
	}
	switch {
	case pool == nil:
		s.bad = fmt.Errorf("%w: postgres: nil pool", driver.ErrInvalid)
	case err != nil:
		s.bad = err
	case s.interval <= 0:
		s.bad = fmt.Errorf("%w: postgres: watch interval %s is not positive", driver.ErrInvalid, s.interval)
	case s.sessions < 0 || s.sessions > MaxSessions:
		s.bad = fmt.Errorf("%w: postgres: %d shared sessions: must be 0 to %d", driver.ErrInvalid, s.sessions, MaxSessions)
	default:
		s.sql = statements(seq, table)
		if s.sessions > 0 {
			s.shared = newShared(pool, s.sessions, jointStatements(s.sql))
		}
		s.createSQL = "CREATE SEQUENCE IF NOT EXISTS " + seq + " AS bigint"
		if table != "" {
			s.holders = holderStatements(table)
		}
	}
	return s
}

// Close ends the store's shared sessions, which frees the locks they hold:
// their leases are lost, as their next Extend tells. Locks held on
// connections of their own are left to their Release. Acquisitions after
// Close fail with driver.ErrUnavailable. Close does not close the pool. It
// never fails; the context is not used, and the error is for io.Closer-like
// callers.
func (s *Store) Close(ctx context.Context) error {
	if s.shared != nil {
		s.shared.close()
	}
	return nil
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	if s.shared == nil {
		return false
	}
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return s.shared.closed
}

// Name returns "postgres".
func (s *Store) Name() string { return "postgres" }

// prepare checks a request and returns its key and the SQL of its mode.
func (s *Store) prepare(req driver.Request) (int64, *modeSQL, error) {
	if s.bad != nil {
		return 0, nil, s.bad
	}
	if req.Capacity != 0 {
		return 0, nil, fmt.Errorf("%w: the postgres store has no semaphores", driver.ErrUnsupported)
	}
	if !req.Mode.Valid() {
		return 0, nil, fmt.Errorf("%w: unknown lock mode %d", driver.ErrInvalid, uint8(req.Mode))
	}
	q, ok := s.sql[req.Mode]
	if !ok {
		return 0, nil, fmt.Errorf("%w: the postgres store has only EX and PR locks, not %s", driver.ErrUnsupported, req.Mode)
	}
	return KeyOf(req.Resource), q, nil
}

// setUp runs Setup unless WithSetup(false) was given.
func (s *Store) setUp(ctx context.Context) error {
	if !s.setup {
		return nil
	}
	return s.Setup(ctx)
}

// conn sets the store up if needed and takes a connection from the pool.
func (s *Store) conn(ctx context.Context) (*pgxpool.Conn, error) {
	if err := s.setUp(ctx); err != nil {
		return nil, err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fail(ctx, "connect", err)
	}
	return c, nil
}

// handle returns the lock of a grant made by this store for req.Owner.
func (s *Store) handle(req driver.Request, g driver.Grant) (*lock, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	l, ok := g.Handle.(*lock)
	if !ok || l == nil || l.store != s || l.owner != req.Owner || l.resource != req.Resource {
		return nil, fmt.Errorf("%w: %q: no lock of this owner in this store", driver.ErrNotHeld, req.Resource)
	}
	return l, nil
}

// fail classifies an error from pgx: the context's end as such, anything
// else as the store being unavailable.
func fail(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && (errors.Is(err, cerr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("postgres %s: %w", op, cerr)
	}
	return fmt.Errorf("%w: postgres %s: %w", driver.ErrUnavailable, op, err)
}

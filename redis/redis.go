// Package redis is the dlm store for a single Redis deployment: one server,
// Sentinel, or Cluster, through the caller's go-redis v9 client.
//
// A lock is one key set with SET NX PX semantics inside a Lua script, its
// value a 128-bit random owner; extend and release are owner-checked scripts.
// Waiting is fair: waiters queue in Redis in arrival order, the release
// hands the lock to the first one inside its own script, and each waiter
// blocks on its own wake-up list, where the grant arrives, so nobody polls,
// nobody barges, and a handoff costs no call of the waiter's.
//
// # Fencing tokens
//
// Each grant's token is the resource's counter plus one (INCR). A new
// counter starts at the Redis server's clock in microseconds, and lives for
// the fence retention (7 days by default); then the next grant starts it
// again at the clock. Tokens of one resource therefore strictly increase
// while the counter key lives and also after it is gone (expired,
// FLUSHALL, or a restart without persistence), provided the server's clock
// has not stepped back past the last token issued and the resource was not
// granted more than once a microsecond on average. They are not comparable
// across resources. A failover to a replica that missed the last writes can
// re-grant a held lock, as with any single-Redis lock; use the dlm server
// where that matters.
//
// The lock's value records the grant's time beside its owner and metadata:
// the clock of the client that granted it (the acquirer, or the releaser
// that handed the lock to a waiter), which Inspect and List report as
// Since.
//
// # What a cycle costs Redis
//
// Every call is one script (EVALSHA), one round trip. Without contention
// an acquisition runs three commands in its script: EXISTS on the queue
// (no barging past waiters), SET NX PX on the lock and INCR on the token
// counter (two more, TIME and a SET, when the counter is new); a release
// runs two, GET and DEL (owner-checked), as bsm/redislock's does. The
// lock's value carries a queue mark, set by the first caller that queues
// for the lock: only the release of a marked lock looks at the queue
// (LINDEX), to hand the lock to the first waiter. The queue's list and
// liveness set, and the clock for them, are read only when a queue
// exists. A renewal runs GET, PEXPIRE and EXISTS on the liveness set, and
// stops looking for waiters once its grant's Blocking channel is closed. A
// lock library with neither tokens nor a queue (bsm/redislock) runs one
// command to acquire; the token and the queue check are what dlm's
// acquisition adds.
//
// Concurrent calls share round trips: the scripts that calls send while
// another is in flight go together in one pipeline once it has answered,
// so under load Redis reads and answers many in one system call each. A
// call alone goes at once, as a plain call. Blocking pops (waiters) keep
// connections of their own.
// BenchmarkServerCost reports the server time and the commands per script.
//
// # Waiting and its bounds
//
// A waiting acquisition holds one connection of the client's pool while it
// blocks, so size the pool (PoolSize) for the number of concurrent waiters.
// A waiter refreshes its place every queue refresh interval (500 ms by
// default); one that dies in the queue is dropped after four intervals
// without a refresh, so it delays those behind it by at most five intervals.
// When a holder's key expires instead of being released, the first waiter
// takes the lock within about a millisecond of the expiry.
//
// A lock handed over by a release gets the TTL and metadata of the
// waiter's latest attempt; Redis counts the TTL from the release, and the
// waiter from that attempt's send time, which came before (see
// Store.AcquireWait), so the lease never outlives the key. A waiter whose
// wait ends just as the lock is handed to it frees the lock as it leaves,
// and the next waiter gets it; one that dies at that moment holds it until
// its TTL, as a holder that dies does.
//
// # Elections and blocking notices
//
// The store reads one resource in one script call (Inspect: the holder
// with its metadata, token, TTL left and grant time, and the live
// waiters), changes a holder's metadata in place (Relabel), and tells
// watchers of a resource about its changes over Redis pub/sub (Watch,
// Notify): what dlm.Election needs. The changers announce their changes
// (package dlm notifies after a win, a proclamation and a resignation); a
// holder that vanishes without telling anyone (a crashed process whose key
// expires) is seen by the watchers' periodic signal instead, every watch
// interval (1 s by default, WithWatchInterval). Release itself publishes
// nothing, so ordinary locks pay nothing for elections.
//
// A grant's Blocking channel is closed when a live waiter queues behind
// it: the grant itself, or the holder's renewal (Extend), counts the live
// waiters in the same script call. A lock that nobody waits for costs one
// EXISTS more per renewal and nothing else, and a renewal after the channel
// closed does not look. A holder therefore learns of a
// waiter at its next renewal after the waiter queued: within the renewal
// interval (TTL/3 with package dlm's auto-renewal) plus one round trip. A
// lease that is not renewed learns only of waiters queued when it was
// granted. A waiter that dies in the queue counts until its place lapses
// (four queue refresh intervals).
//
// Requires Redis 6.2 or later (scripts that read TIME after writing, which
// needs the replication of a script's effects).
package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// Defaults of the store's options.
const (
	DefaultPrefix         = "dlm:"
	DefaultQueueRefresh   = 500 * time.Millisecond
	DefaultFenceRetention = 7 * 24 * time.Hour
	DefaultWatchInterval  = time.Second
)

// Store is a dlm store over one Redis deployment. It implements
// driver.Driver, driver.Waiter, driver.Lister, driver.Inspector,
// driver.Relabeler, driver.Watcher and driver.Notifier, and declares
// driver.FeatureBlocking. It is safe for concurrent use.
type Store struct {
	rdb       goredis.UniversalClient
	batch     *redislua.Batcher // the scripts of concurrent calls, pipelined
	prefix    string
	refresh   time.Duration
	retention time.Duration
	watchTick time.Duration
	bad       error // a configuration error reported by every call

	// livenessMS is the liveness of a waiter's place in milliseconds,
	// and settings the scripts' redislua.Settings, as the scripts take
	// them (boxed once).
	livenessMS, settings any
	// settingsText is settings unboxed, for the release's argument.
	settingsText string

	life  context.Context // ends with Close, and the watches with it
	end   context.CancelFunc
	pumps sync.WaitGroup // wake-up listeners and watches
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes; the default is
// "dlm:". It must not contain '{' or '}'.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithQueueRefresh sets how often a waiter refreshes its place in the queue
// (see the package documentation for the bounds it sets). It must be at
// least 10 ms; the default is 500 ms.
func WithQueueRefresh(d time.Duration) Option { return func(s *Store) { s.refresh = d } }

// WithFenceRetention sets how long a resource's token counter is kept from
// its creation (the next grant after it lapses starts a new one at the
// server's clock); the default is 7 days. It must be at least one minute.
func WithFenceRetention(d time.Duration) Option { return func(s *Store) { s.retention = d } }

// WithWatchInterval sets how often a watch signals even though nobody
// announced a change: the bound on how long a holder that vanished without
// telling anyone (its key expired) goes unseen by the watchers, and on how
// long a watch takes to see that its connection hangs (two intervals). It
// must be at least 10 ms; the default is 1 s.
func WithWatchInterval(d time.Duration) Option { return func(s *Store) { s.watchTick = d } }

// New returns a store over rdb, which may be a *goredis.Client,
// *goredis.ClusterClient or a Sentinel failover client.
func New(rdb goredis.UniversalClient, opts ...Option) *Store {
	s := &Store{
		rdb: rdb, batch: redislua.NewBatcher(rdb), prefix: DefaultPrefix, refresh: DefaultQueueRefresh, retention: DefaultFenceRetention,
		watchTick: DefaultWatchInterval,
	}
	s.life, s.end = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	switch {
	case strings.ContainsAny(s.prefix, "{}"):
		s.bad = fmt.Errorf("%w: redis key prefix %q contains a brace", driver.ErrInvalid, s.prefix)
	case s.refresh < 10*time.Millisecond:
		s.bad = fmt.Errorf("%w: queue refresh %s is below 10ms", driver.ErrInvalid, s.refresh)
	case s.retention < time.Minute:
		s.bad = fmt.Errorf("%w: fence retention %s is below one minute", driver.ErrInvalid, s.retention)
	case s.watchTick < 10*time.Millisecond:
		s.bad = fmt.Errorf("%w: watch interval %s is below 10ms", driver.ErrInvalid, s.watchTick)
	}
	s.settingsText = redislua.Settings(s.liveness(), s.retention)
	s.livenessMS, s.settings = ms(s.liveness().Milliseconds()), s.settingsText
	return s
}

// Name returns "redis".
func (s *Store) Name() string { return "redis" }

// Close ends the store's watches (their channels close) and waits for
// them and for the background wake-up listeners to stop, at most about one
// second after the last waiting call returned, and for the scripts in
// flight to be answered (calls given up by their callers run to their
// answers). It does not close the Redis client. Watch fails on a closed
// store; the other calls still work.
func (s *Store) Close() error {
	s.end()
	s.pumps.Wait()
	s.batch.Close()
	return nil
}

// liveness is how long a waiter's place lasts without a refresh.
func (s *Store) liveness() time.Duration { return 4 * s.refresh }

func (s *Store) check(req driver.Request) error {
	if s.bad != nil {
		return s.bad
	}
	if req.Mode != driver.EX {
		return fmt.Errorf("%w: the redis store has only EX locks, not %s", driver.ErrUnsupported, req.Mode)
	}
	return nil
}

// Acquire makes one attempt, without queueing.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	g, _, _, err := s.attempt(ctx, req, queueNot, false, "")
	return g, err
}

// attempt runs the acquire script once. When not granted it returns
// ErrTaken, the lock's remaining TTL (negative when free) and whether the
// caller is first in the queue. queue says whether to join the queue when
// not granted; listening says the caller blocks on its wake-up list; name
// is the attempt's name, which a release that hands the lock to the caller
// echoes (queueing only).
func (s *Store) attempt(ctx context.Context, req driver.Request, queue queueing, listening bool, name string) (driver.Grant, time.Duration, bool, error) {
	args := make([]any, 0, 7)
	args = append(args, req.Owner, ms(req.TTL.Milliseconds()), redislua.TimeThen(time.Now(), req.Metadata), queue.arg(), s.settings)
	if queue != queueNot || listening {
		args = append(args, flag(listening), name)
	}
	res, err := s.batch.Run(ctx, redislua.Acquire, []string{s.lockKey(req.Resource)}, args...).Result()
	if err != nil {
		return driver.Grant{}, 0, false, s.fail(ctx, "acquire", err)
	}
	switch r := res.(type) {
	case int64: // the fast path's grant
		return tokenGrant(r, 0)
	case []any:
		if len(r) != 3 {
			break
		}
		switch r[0] {
		case int64(1):
			tok, _ := r[1].(int64)
			waiting, _ := r[2].(int64)
			return tokenGrant(tok, waiting)
		case int64(0):
			pttl, _ := r[1].(int64)
			head, _ := r[2].(int64)
			return driver.Grant{}, time.Duration(pttl) * time.Millisecond, head == 1,
				fmt.Errorf("%w: %q", driver.ErrTaken, req.Resource)
		}
	}
	return driver.Grant{}, 0, false, fmt.Errorf("%w: redis acquire: unexpected reply %v", driver.ErrUnavailable, res)
}

// tokenGrant is attempt's result for a grant of the token tok, with
// waiting live waiters queued behind it. Tokens start at 1: a token of 0
// (a counter that is gone, or a reply that was not an integer) is no
// grant.
func tokenGrant(tok, waiting int64) (driver.Grant, time.Duration, bool, error) {
	if tok <= 0 {
		return driver.Grant{}, 0, false, fmt.Errorf("%w: redis acquire: bad token %d", driver.ErrUnavailable, tok)
	}
	return newGrant(uint64(tok), waiting > 0), 0, false, nil
}

// Extend resets the lock's TTL if req.Owner holds it, and closes the
// grant's Blocking channel if a live waiter queues behind it (it does not
// look once the channel is closed).
func (s *Store) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	if s.bad != nil {
		return s.bad
	}
	n, err := s.batch.Run(ctx, redislua.Extend, s.keysOf(req.Resource, liveSuffix),
		req.Owner, ms(req.TTL.Milliseconds()), flag(!isBlocked(g))).Int64()
	if err != nil {
		return s.fail(ctx, "extend", err)
	}
	if n == 2 {
		blocked(g)
		n = 1
	}
	return notHeld(n, req.Resource)
}

// Release frees the lock if req.Owner holds it and hands it to the first
// live waiter (see AcquireWait).
func (s *Store) Release(ctx context.Context, req driver.Request, _ driver.Grant) error {
	if s.bad != nil {
		return s.bad
	}
	n, err := s.batch.Run(ctx, redislua.Release, []string{s.lockKey(req.Resource)},
		req.Owner, redislua.TimeThen(time.Now(), s.settingsText)).Int64()
	if err != nil {
		return s.fail(ctx, "release", err)
	}
	return notHeld(n, req.Resource)
}

func notHeld(n int64, resource string) error {
	switch n {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("%w: %q is held by another owner", driver.ErrNotHeld, resource)
	default:
		return fmt.Errorf("%w: %q is not locked (expired or deleted)", driver.ErrNotHeld, resource)
	}
}

// fail classifies an error from go-redis: the context's end as such,
// anything else as the store being unavailable.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && (errors.Is(err, cerr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("redis %s: %w", op, cerr)
	}
	return fmt.Errorf("%w: redis %s: %w", driver.ErrUnavailable, op, err)
}

// queueing is what an attempt does when not granted.
type queueing int

const (
	queueNot   queueing = iota // return at once
	queueJoin                  // join the queue
	queueAgain                 // refresh the caller's place: it has queued before
)

// queueArgs are the queueing values as the acquire script takes them,
// boxed once.
var queueArgs = [...]any{queueNot: "0", queueJoin: "1", queueAgain: "2"}

// arg returns q as the acquire script takes it.
func (q queueing) arg() any { return queueArgs[q] }

// flag returns b as the scripts take it, "1" or "0".
func flag(b bool) any {
	if b {
		return flagTrue
	}
	return flagFalse
}

// flagTrue and flagFalse are flag's values, boxed once.
var flagTrue, flagFalse any = "1", "0"

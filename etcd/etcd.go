// Package etcd is the dlm store for an etcd cluster (v3 API), through the
// caller's go.etcd.io/etcd/client/v3 client.
//
// # Keys, leases and tokens
//
// Each request is one key, prefix + resource + "/" + lease + "-" + slot,
// written under its session's lease (lease in hex) in one transaction
// guarded by CreateRevision(key) == 0. A session's requests on one resource
// reuse their slots (0, 1, ...) from one acquisition to the next, as
// concurrency.Mutex reuses its session's key: etcd keeps every key ever
// created in its index until its history is compacted, and each read of a
// resource's queue walks them all, so a key per acquisition made every
// cycle on a busy resource slower than the last. In the resource part, '%'
// and '/' are escaped as "%25" and "%2F", so that the keys of "a" and of
// "a/b" never share a directory. The value is the mode's name, a space, the
// request's owner, a newline, and the request's metadata. Requests are
// ordered by the keys' create revisions: a request is granted when no key
// created before its own holds or waits for a mode that conflicts with it
// (driver.Mode.Compatible). All six modes work. For EX and PR this is plain
// FIFO: a reader behind a waiting writer waits. A request never waits for
// earlier compatible ones, though, so a CR passes a queued PW, with which it
// is compatible. The fencing token is the key's create revision: it is
// cluster-wide, strictly increasing, and kept across restarts and leader
// changes; tokens of different resources are comparable.
//
// # Sessions
//
// Like concurrency.Session, the store keeps one etcd lease alive in the
// background and puts the keys of many requests under it: one session per
// lease length, the requests' TTL rounded up to whole seconds, so that
// requests of one TTL share a lease (an application usually has one or a
// few). The session's lease is granted by the first request of its TTL and
// renewed with one KeepAliveOnce every third of its TTL (a failed one is
// retried every 250 ms); a session that no request used between two
// keep-alives is revoked. An uncontended acquire is then one transaction and
// a release one delete: two writes per cycle, as for concurrency.Mutex.
// Releases that come while one is in flight wait for it, and then go in one
// transaction of deletes: under many lockers one call and one Raft entry
// carry many releases, and a lone release is still one delete.
// Close revokes every session's lease, which deletes all their keys at once.
//
// The lock lives as long as its session: Extend renews nothing, and only
// reads the grant's key to check that it is still there as created
// (driver.ErrNotHeld otherwise). The store implements driver.Validator:
// a grant is valid until the sending time of the last keep-alive etcd
// acknowledged plus the lease's TTL, less 1% of it and 2 ms for clock drift,
// and package dlm's deadline is never later. When that moment passes
// without a new acknowledgement, or etcd says the lease is gone (revoked),
// the session ends: every grant under it is lost (its Grant.Lost channel is
// closed, before etcd can expire the lease and grant the locks to another
// client), its waiters return driver.ErrUnavailable, and the next request
// opens a new session. A holder that dies leaves its locks to the lease's
// expiry, as before: the TTL rounded up to whole seconds, and at least the
// server's minimum (1.5 × the election timeout rounded up, 2 s with etcd's
// default timing).
//
// A key that the store could not delete (a release or a withdrawal that
// failed) is deleted again after each keep-alive, so that a live session
// keeps no key that nobody owns; a release of a request whose outcome was
// unknown (no handle) that fails ends the session of its TTL, so that its
// lease expires with a key that may be there.
//
// # Waiting
//
// AcquireWait keeps its key and watches only its predecessor: the last key
// created before its own whose mode conflicts with its own. When the
// predecessor is deleted, the waiter reads the queue again and either holds
// the lock or watches the next predecessor. Nobody polls, and a release
// wakes only the waiter (or the readers) right behind it.
//
// The watch starts at etcd's current revision, not at the revision after
// the read that found the predecessor: etcd serves a watch that starts in
// the past from a catch-up loop that runs every 100 ms, so such a watch
// hears of the deletion up to 100 ms late whenever any write happened
// between the read and the watch, which is common under contention
// (measured: 97 ms median then, against 1 ms for a watch at the current
// revision). When the revision at which etcd created the watch is past the
// read's, one read of the predecessor's key tells whether it was deleted in
// between; otherwise nothing can have been missed.
//
// A waiter also watches its own key the same way; when its own key
// vanishes, or its session ends, it returns driver.ErrUnavailable at once.
// Before a wait reports success, the read of the queue checks that the
// waiter's own key, with its create revision and lease, is still there.
//
// # Elections and blocking notices
//
// The store implements the interfaces package dlm's elections use.
// Inspect reads one resource's queue in one range request; Watch is one
// etcd watch on the resource's directory, so changes are pushed (no
// polling; see Watch for when its channel closes); Relabel rewrites the
// value of a held key in place, guarded by its create revision, keeping its
// lease and its token. etcd records no time with a key, so Inspect and List
// show no Since.
//
// Every grant but NL carries a Blocking channel (driver.FeatureBlocking),
// closed once a request whose mode conflicts with the grant's is created
// behind it: a waiter. (A single attempt refused at once creates no key,
// so it tells nobody.) A grant whose queue already has one when granted
// gets the channel closed. Otherwise one watch on the resource's directory
// looks for one, started when the holder first asks for the channel
// (Lease.Blocking; driver.Grant.WatchBlocking), in a goroutine of its own
// (the caller does not wait for it): a holder that never looks costs etcd
// no watch. The watch opens at the current revision and first reads the
// keys created behind the grant's since (one range request); it is
// multiplexed on the client's watch stream, and ends at Release, when the
// grant's key goes (its lease expired or was revoked), when it closes the
// channel, or when the client closes. A watch that cannot be created
// within the request timeout, or fails, leaves the channel open.
//
// # Errors
//
// Each call to etcd is bounded by the request timeout (WithRequestTimeout,
// 5 s by default): etcd's client otherwise waits for a connection as long as
// the context allows. The store enforces it, and the caller's deadline, on
// the client's side: calls reach etcd without a deadline, which would cost
// its server a timer per request, and end as cancelled when either runs
// out. A call that fails or times out while the caller's context is alive
// is driver.ErrUnavailable wrapped around the cause; contention is
// driver.ErrTaken.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
)

// Defaults of the store's options.
const (
	// DefaultPrefix is the prefix of every key the store writes.
	DefaultPrefix = "dlm/"
	// DefaultRequestTimeout bounds each call to etcd.
	DefaultRequestTimeout = 5 * time.Second
)

// Store is a dlm store over an etcd cluster. It implements driver.Driver,
// driver.Waiter, driver.Lister, driver.Inspector, driver.Watcher,
// driver.Relabeler and driver.Validator, and declares
// driver.FeatureBlocking. It is safe for concurrent use. The goroutines it
// starts that outlive a call are those of a session's keep-alive, which end
// at Close, when the session ends or with the client; of a grant's Blocking
// watch, once asked for, which ends at Release or with the grant's key; and
// of a Watch, which ends with its channel. Call Close when done with the
// store.
type Store struct {
	cli     *clientv3.Client
	kv      kv      // the calls of every cycle (see kv)
	deletes deletes // releases in flight and waiting (see deleteKey)
	prefix  string
	timeout time.Duration
	bad     error // a configuration error reported by every call

	clock alarm.Clock // the request timeouts

	ctx    context.Context // ends at Close or with the client: the store's goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup // the sessions' keep-alive goroutines

	opening  sync.Mutex // held while a session's lease is granted
	mu       sync.Mutex
	sessions map[int64]*session // by lease seconds
	closed   bool
	// creating holds the create transactions whose callers left before
	// their answers, by request, until the store settled them (see
	// createTxn); settling counts their goroutines.
	creating map[request]*creation
	settling sync.WaitGroup
}

// request names one request: a resource and the owner value of the
// acquisition.
type request struct{ resource, owner string }

var (
	_ driver.Driver = (*Store)(nil)
	_ driver.Waiter = (*Store)(nil)
	_ driver.Namer  = (*Store)(nil)
)

// New returns a store over cli. The store does not close cli.
//
// A lock's calls are small and one at a time, and gRPC's default dynamic
// flow control then pings etcd after nearly every reply to estimate the
// bandwidth. Dialling cli with static windows turns that off, as storeurl
// does:
//
//	clientv3.Config{
//		Endpoints:   endpoints,
//		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)},
//	}
//
// On the benchmark machine that made an uncontended cycle about 2.5% faster
// and cost etcd about 8% less CPU per cycle (docs/stores.md).
func New(cli *clientv3.Client, opts ...Option) *Store {
	s := &Store{cli: cli, prefix: DefaultPrefix, timeout: DefaultRequestTimeout, sessions: make(map[int64]*session),
		creating: make(map[request]*creation)}
	for _, o := range opts {
		o(s)
	}
	switch {
	case cli == nil:
		s.bad = fmt.Errorf("%w: etcd client is nil", driver.ErrInvalid)
	case s.timeout <= 0:
		s.bad = fmt.Errorf("%w: etcd request timeout %s is not positive", driver.ErrInvalid, s.timeout)
	}
	if s.bad == nil {
		s.kv = newKV(cli)
		s.ctx, s.cancel = context.WithCancel(cli.Ctx())
	}
	return s
}

// Name returns "etcd".
func (s *Store) Name() string { return "etcd" }

// check rejects a request that the store cannot serve.
func (s *Store) check(req driver.Request) error {
	switch {
	case s.bad != nil:
		return s.bad
	case req.Resource == "":
		return fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	case req.Owner == "" || strings.ContainsAny(req.Owner, "/\n"):
		return fmt.Errorf("%w: owner %q is empty or contains '/' or a newline", driver.ErrInvalid, req.Owner)
	case req.TTL <= 0:
		return fmt.Errorf("%w: TTL %s is not positive", driver.ErrInvalid, req.TTL)
	case !req.Mode.Valid():
		return fmt.Errorf("%w: unknown lock mode %d", driver.ErrInvalid, uint8(req.Mode))
	}
	return nil
}

// call returns the context of one call to etcd: it ends with ctx, or at
// the request timeout if ctx allows longer, and it hides its deadline, so
// that etcd's server does not arm a timer for each request (the request's
// end reaches the server as its cancellation). The request timeout runs on
// the store's clock rather than on a runtime timer per call. Together a
// few percent of an uncontended cycle.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return noDeadline{ctx}, func() {} // ctx ends the call first
	}
	cctx, cancel := s.clock.WithTimeout(ctx, s.timeout)
	return noDeadline{cctx}, cancel
}

// noDeadline is a context that ends as its parent does but reports no
// deadline.
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// fail classifies an error from etcd's client: the end of the caller's
// context as such, anything else (including the request timeout) as the
// store being unavailable.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("etcd %s: %w", op, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// ctx lives: the request timeout ended the call.
		err = fmt.Errorf("no answer within the request timeout (%s): %w", s.timeout, err)
	}
	return fmt.Errorf("%w: etcd %s: %w", driver.ErrUnavailable, op, err)
}

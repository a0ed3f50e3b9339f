// Package dlmserver is the dlm store for the dlm server.
//
// A Store keeps one session with the server over one gRPC stream, and every
// lock of the process goes through it: requests go up, grants and every other
// lock event are pushed down (nothing polls), and keepalives are sent on their
// own. Locks live as long as the session: the server ends the session, and
// releases its locks, when no keepalive reached it for the session TTL.
//
// # Loss
//
// The store counts the session's validity from the send time of the last
// keepalive the server acknowledged: send time + session TTL − drift. The
// server counts from the moment the keepalive arrived, which is later, so
// when keepalives stop getting through the store gives up the session, and
// every lease reports Lost, before the server can give a lock to anyone
// else. The lease TTL given to dlm is enforced by package dlm on top (a lease
// that is not renewed is released at its deadline).
//
// # Reconnection
//
// When the stream breaks, the store reconnects by itself (rounds over
// the servers, with jittered exponential pauses between them of at most
// 1 s while no server answers, and at most 250 ms while servers answer but
// none leads yet: an election, over in a few election timeouts) and
// resumes the session while it is still valid, with the session's secret resume token
// (kept from the open, never logged); the server answers with the session's
// whole lock state, from which the store settles requests whose answers were
// lost. Calls made meanwhile wait for the new stream; calls made with no
// valid session fail at once with dlm.ErrUnavailable.
//
// # Modes and semaphores
//
// All six lock modes, conversion (driver.Converter), counting semaphores and
// try-locks (dlm.WithWait(0)) are available; waits are queued in the server
// in FIFO order and granted by push (driver.Waiter).
//
// # Blocking notices
//
// The server tells a holder when a request that its lock blocks queues
// behind it (a conflicting mode, or permits of a semaphore that do not
// fit), and the store closes the grant's driver.Grant.Blocking channel
// (dlm.Lease.Blocking) at once: a push, nothing polls. A compatible
// request closes nothing. The server tells a holder once per mode it
// could yield to, and again after a conversion: a Convert that changes the
// mode returns a fresh channel. A notice that falls while the store is
// reconnecting is not sent again on the new stream: the channel then
// stays open although someone waits.
//
// # Deadlocks
//
// The server refuses a request that would close a cycle of owners waiting
// on each other with driver.ErrDeadlock (dlm.ErrDeadlock), across every
// session and process. Each acquisition is an owner of its own, except
// that the acquisitions of one driver.Request.Group (dlm.Owner) are one
// owner: the store gives the group one owner id in its session, kept
// while the group has a lock or a request in the store, and forgotten
// after. A group seen from two stores (two sessions) is two owners. A
// group that holds a lock and asks for it again in a conflicting mode
// waits on itself: a waiting request is refused with driver.ErrDeadlock at
// once, a try-lock with driver.ErrTaken. The refusal names the resource
// asked for, not the other resources of the cycle (the server's search
// does not record its path).
//
// # Elections
//
// Inspect reads one resource by its exact name (its holders with their
// metadata, token and grant time). Relabel changes a held lock's metadata
// in place, through the server's log. Watch follows one resource: the
// leader pushes a signal after every change it applies to it (grants,
// releases, queued and withdrawn requests, conversions, relabels, the end
// of a holder's session, expiry included), so nothing polls; the watch
// ends with the leadership of its server, and the caller watches again.
// None of them needs a Notifier: the server sees every change itself.
//
// # Security
//
// WithTLS connects over TLS (and, with a client certificate, mutual TLS);
// WithToken or WithTokenFile sends a bearer token with every call, only
// over TLS unless AllowTokenOverPlaintext says otherwise. A server with
// authentication refuses a store without valid credentials
// (ErrUnauthenticated) and requests its identity may not make
// (ErrPermissionDenied); both match dlm.ErrInvalid, so they are not
// retried.
package dlmserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// Defaults.
const (
	// DefaultSessionTTL is the session TTL: how long the server keeps the
	// session's locks after the last keepalive it received.
	DefaultSessionTTL = 10 * time.Second
)

// Option configures a Store.
type Option func(*options)

type options struct {
	ttl            time.Duration
	interval       time.Duration
	label          string
	log            *slog.Logger
	dialOpts       []grpc.DialOption
	reconnect      time.Duration
	tls            *tls.Config
	token          string
	tokenFile      string
	plaintextToken bool
	transport      Transport
}

// WithSessionTTL sets the session TTL (default 10s; the server accepts 100ms
// to 1h). A shorter TTL frees a dead client's locks sooner and costs more
// keepalives.
func WithSessionTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithKeepAliveInterval sets how often keepalives are sent; default a
// quarter of the session TTL.
func WithKeepAliveInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithLabel sets the session label shown in the server's listings (default:
// the program's name, host and pid, such as "worker (db1 pid 4242)"). Like a resource name, it must be valid UTF-8 without
// control or bidirectional formatting characters (see package dlm's
// limits), else Dial fails with dlm.ErrInvalid.
func WithLabel(label string) Option { return func(o *options) { o.label = label } }

// WithLogger sets the logger; default discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithDialOptions adds gRPC dial options (the default connection is
// plaintext; see WithTLS). They apply to the session stream only with
// WithTransport(TransportGRPC).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Store is a dlm store backed by a dlm server. It implements driver.Driver,
// driver.Waiter and driver.Converter, offers semaphores, blocking notices
// and deadlock detection among groups, and reads and follows resources for
// elections: driver.Inspector (Inspect), driver.Watcher (Watch) and
// driver.Relabeler (Relabel). It is safe for concurrent use. Close it when done: that ends the session and releases
// its locks at once.
type Store struct {
	opt options
	srv *servers
	log *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	st state
}

var (
	_ driver.Driver    = (*Store)(nil)
	_ driver.Waiter    = (*Store)(nil)
	_ driver.Converter = (*Store)(nil)
)

// Dial connects to the dlm server at addr (host:port) and opens a session.
// It returns once the session is open, or with an error wrapping
// dlm.ErrUnavailable if that fails before ctx ends.
//
// For a cluster, addr lists several servers separated by commas (at most
// MaxServers). The store keeps its session on the leader: a follower
// refuses the session and names the leader, whom the store then tries
// first; otherwise it tries the addresses in turn. When the leader changes
// or its server dies, the store moves on by itself and resumes the session
// on the new leader, which keeps the session's locks while it is valid.
func Dial(ctx context.Context, addr string, opts ...Option) (*Store, error) {
	o := options{ttl: DefaultSessionTTL, label: defaultLabel(), reconnect: 50 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.ttl <= 0 {
		return nil, fmt.Errorf("%w: session TTL %s", driver.ErrInvalid, o.ttl)
	}
	if err := driver.CheckName(o.label); err != nil {
		return nil, fmt.Errorf("%w: session label %q: %w", driver.ErrInvalid, o.label, err)
	}
	if o.interval <= 0 {
		o.interval = o.ttl / 4
	}
	if o.interval >= o.ttl {
		return nil, fmt.Errorf("%w: keepalive interval %s is not below the session TTL %s", driver.ErrInvalid, o.interval, o.ttl)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.transport != TransportTCP && o.transport != TransportGRPC {
		return nil, fmt.Errorf("%w: unknown transport %s", driver.ErrInvalid, o.transport)
	}
	dial, err := o.security()
	if err != nil {
		return nil, err
	}
	srv, err := newServers(addr, append(dial, o.dialOpts...))
	if err != nil {
		return nil, err
	}
	s := &Store{opt: o, srv: srv, log: o.log}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.st.init()
	first, err := s.dialSession(ctx)
	if err != nil {
		s.cancel()
		return nil, errors.Join(err, srv.close())
	}
	s.wg.Add(2)
	go s.run(first)
	go s.keepalive()
	return s, nil
}

// defaultLabel is the session label of a store dialed without WithLabel:
// the program's name, host and pid, made acceptable as a label.
func defaultLabel() string {
	host, _ := os.Hostname()
	prog := filepath.Base(os.Args[0])
	if len(prog) > 100 {
		prog = prog[:100]
	}
	return driver.SanitizeName(fmt.Sprintf("%s (%s pid %d)", prog, host, os.Getpid()))
}

// security returns the dial options of TLS and the token.
func (o *options) security() ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// Static flow-control windows turn off BDP estimation, whose pings
		// add packets (and wake-ups on both ends) to a stream of small
		// messages; the server does the same.
		grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)}
	if o.tokenFile != "" {
		if o.token != "" {
			return nil, fmt.Errorf("%w: a token and a token file", driver.ErrInvalid)
		}
		tok, err := ReadTokenFile(o.tokenFile)
		if err != nil {
			return nil, err
		}
		o.token = tok
	}
	if o.token == "" {
		return dial, nil
	}
	if err := checkToken(o.token); err != nil {
		return nil, fmt.Errorf("%w: token: %w", driver.ErrInvalid, err)
	}
	if o.tls == nil && !o.plaintextToken {
		return nil, fmt.Errorf("%w: a token is only sent over TLS: add WithTLS (or AllowTokenOverPlaintext on a network you trust)", driver.ErrInvalid)
	}
	return append(dial, grpc.WithPerRPCCredentials(tokenCreds{token: o.token, plaintext: o.plaintextToken})), nil
}

// Name returns "dlm".
func (s *Store) Name() string { return "dlm" }

// Features declares semaphores, blocking notices (driver.Grant.Blocking)
// and deadlock detection among groups (driver.Request.Group).
func (s *Store) Features() driver.Feature {
	return driver.FeatureSemaphores | driver.FeatureBlocking | driver.FeatureDeadlocks
}

// Drift allows for the difference in clock rate between client and server
// over a lease: 1% of the TTL plus 2 ms.
func (s *Store) Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Session returns the id of the current session (0 while none is open).
func (s *Store) Session() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.sid
}

// Close ends the session (the server releases its locks and cancels its
// requests at once), closes the connection and stops the store's
// goroutines. Leases still held report Lost. It waits for the server's
// confirmation until ctx ends. If the server cannot be reached at that
// moment, the session and its locks end at the session TTL instead.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.st.closing {
		s.mu.Unlock()
		return nil
	}
	s.st.closing = true
	conn := s.st.conn
	s.mu.Unlock()

	var err error
	if conn != nil {
		conn.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
		select {
		case <-conn.done:
		case <-ctx.Done():
			err = fmt.Errorf("dlm: close session: %w", ctx.Err())
		}
	}
	s.cancel()
	s.mu.Lock()
	s.loseSessionLocked(errors.New("the store was closed"))
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(err, s.srv.close())
}

// rpc returns the client of the server in use, for unary calls.
func (s *Store) rpc() dlmpb.DLMClient { return s.srv.current().client }

// dialSession opens the first session. While dlm nodes answer but none
// serves as leader (an election), it tries again until ctx ends; when no
// server answers at all it fails at once.
func (s *Store) dialSession(ctx context.Context) (*streamConn, error) {
	pause := s.opt.reconnect
	for {
		conn, leaderless, err := s.connectOnce(ctx)
		if err == nil || !leaderless {
			return conn, err
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		pause = nextPause(pause, leaderless)
	}
}

// The longest pauses between rounds of connection attempts: while no
// server answers, and while servers answer but none leads yet (an
// election, which ends in a few election timeouts; a node's "not the
// leader" costs it little). A leader that serves briefly, as when leaders
// change again and again, is found within about one of the shorter pauses.
const (
	maxReconnectPause  = time.Second
	maxLeaderlessPause = 250 * time.Millisecond
)

// nextPause doubles pause up to the bound for the last round's outcome.
func nextPause(pause time.Duration, leaderless bool) time.Duration {
	if leaderless {
		return min(pause*2, maxLeaderlessPause)
	}
	return min(pause*2, maxReconnectPause)
}

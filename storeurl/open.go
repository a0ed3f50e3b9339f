package storeurl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/postgres"
	"github.com/dlmhq/dlm/redis"
	"github.com/dlmhq/dlm/redlock"
)

// Store is an open store and the connections it owns.
type Store struct {
	spec    *Spec
	d       driver.Driver
	closers []func(context.Context) error
}

// Driver returns the store, for dlm.New. NewClient does both steps.
func (s *Store) Driver() driver.Driver { return s.d }

// Spec returns the store's parsed URL.
func (s *Store) Spec() *Spec { return s.spec }

// Kind returns the kind of store.
func (s *Store) Kind() Kind { return s.spec.Kind }

// String returns the store's URL with its credentials redacted.
func (s *Store) String() string { return Redact(s.spec.URL.String()) }

// Close closes the store and its connections: a dlm session ends (its locks
// are released at once), client pools close. It returns the first error.
func (s *Store) Close(ctx context.Context) error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i](ctx))
	}
	return errors.Join(errs...)
}

// Option configures Open.
type Option func(*openOptions)

type openOptions struct {
	label     string
	log       *slog.Logger
	tokenFile string
	client    []dlm.ClientOption
}

// WithLabel names this client to the stores that show one (a dlm server
// session's label); a URL's label parameter takes precedence.
func WithLabel(label string) Option { return func(o *openOptions) { o.label = label } }

// WithLogger sets the logger of the stores that log (dlm server sessions),
// and of the client NewClient returns.
func WithLogger(l *slog.Logger) Option { return func(o *openOptions) { o.log = l } }

// WithClientOptions configures the client NewClient returns; Open ignores
// them.
func WithClientOptions(opts ...dlm.ClientOption) Option {
	return func(o *openOptions) { o.client = append(o.client, opts...) }
}

// WithTokenFile names the file holding the bearer token for a dlm server
// (see dlmserver.WithTokenFile) when the URL has no token_file parameter; ""
// does nothing, and other stores ignore it. The token is only sent over
// TLS: with a dlm URL without TLS, Open fails. `dlm` passes
// $DLM_TOKEN_FILE.
func WithTokenFile(path string) Option { return func(o *openOptions) { o.tokenFile = path } }

// NewClient opens the store at rawURL as Open does and returns a client
// over it, with the store to close when the program is done with its locks
// (closing a dlm server's store ends its session, which releases its locks
// at once):
//
//	locks, store, err := storeurl.NewClient(ctx, "dlm://127.0.0.1:7420")
//	if err != nil {
//		return err
//	}
//	defer store.Close(ctx)
//
// WithClientOptions configures the client, whose logger is WithLogger's
// unless a client option sets another. On error, nothing is left open.
func NewClient(ctx context.Context, rawURL string, opts ...Option) (*dlm.Client, *Store, error) {
	s, err := Open(ctx, rawURL, opts...)
	if err != nil {
		return nil, nil, err
	}
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	var copts []dlm.ClientOption
	if o.log != nil {
		copts = append(copts, dlm.WithLogger(o.log))
	}
	return dlm.New(s.d, append(copts, o.client...)...), s, nil
}

// Open parses rawURL (DefaultURL when empty) and opens the store. It
// connects where a store needs a connection to exist (a dlm server
// session); other stores connect lazily and report an unreachable server at
// their first call. ctx bounds the connection. A store that cannot be
// reached fails with an *UnreachableError (see Spec.Unreachable).
// NewClient also returns a client over the store.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	spec, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{spec: spec}
	start := time.Now()
	switch spec.Kind {
	case KindDLM:
		err = s.openDLM(ctx, o)
	case KindRedis:
		err = s.openRedis()
	case KindRedlock:
		err = s.openRedlock()
	case KindPostgres:
		err = s.openPostgres(ctx)
	case KindEtcd:
		err = s.openEtcd()
	}
	if err != nil {
		if cerr := s.Close(context.Background()); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, spec.Unreachable(err, time.Since(start))
	}
	return s, nil
}

// openDLM opens a session on the leader among the URL's servers.
func (s *Store) openDLM(ctx context.Context, o openOptions) error {
	ttl, err := s.spec.duration("session_ttl", dlmserver.DefaultSessionTTL)
	if err != nil {
		return err
	}
	ropts := []dlmserver.Option{dlmserver.WithSessionTTL(ttl)}
	if _, ok := s.spec.Params["keepalive"]; ok {
		ka, err := s.spec.duration("keepalive", 0)
		if err != nil {
			return err
		}
		ropts = append(ropts, dlmserver.WithKeepAliveInterval(ka))
	}
	switch t := s.spec.Params["transport"]; t {
	case "", "tcp":
	case "grpc":
		ropts = append(ropts, dlmserver.WithTransport(dlmserver.TransportGRPC))
	default:
		return fmt.Errorf("%w: transport=%q: want tcp or grpc", ErrBadURL, t)
	}
	if l, ok := s.spec.Params["label"]; ok {
		o.label = l
	}
	if o.label != "" {
		ropts = append(ropts, dlmserver.WithLabel(o.label))
	}
	if o.log != nil {
		ropts = append(ropts, dlmserver.WithLogger(o.log))
	}
	tlsCfg, tokenFile, err := s.spec.DLMSecurity()
	if err != nil {
		return err
	}
	if tlsCfg != nil {
		ropts = append(ropts, dlmserver.WithTLS(tlsCfg))
	}
	if tokenFile == "" {
		tokenFile = o.tokenFile
	}
	if tokenFile != "" {
		if tlsCfg == nil {
			return fmt.Errorf("%w: a token file is given, but %s has no TLS: a token is never sent in plaintext (use dlms:// or tls=true)", ErrBadURL, s)
		}
		ropts = append(ropts, dlmserver.WithTokenFile(tokenFile))
	}
	// One store over every address: it keeps its session on the leader
	// and follows it.
	st, err := dlmserver.Dial(ctx, strings.Join(s.spec.Hosts, ","), ropts...)
	if err != nil {
		return err
	}
	s.d = st
	s.closers = append(s.closers, st.Close)
	return nil
}

// redisOptions parses a redis URL for one host.
func (s *Store) redisOptions(host string) (*goredis.Options, error) {
	u := *s.spec.URL
	u.Scheme = "redis"
	if s.spec.TLS {
		u.Scheme = "rediss"
	}
	u.Host = host
	ro, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	// Calls end with their context, as dlm's retry and wait policies
	// (and redlock's per-node timeouts) need.
	ro.ContextTimeoutEnabled = true
	return ro, nil
}

func (s *Store) openRedis() error {
	refresh, err := s.spec.duration("queue_refresh", redis.DefaultQueueRefresh)
	if err != nil {
		return err
	}
	retention, err := s.spec.duration("fence_retention", redis.DefaultFenceRetention)
	if err != nil {
		return err
	}
	ro, err := s.redisOptions(s.spec.Hosts[0])
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(ro)
	s.closers = append(s.closers, func(context.Context) error { return rdb.Close() })
	opts := []redis.Option{redis.WithQueueRefresh(refresh), redis.WithFenceRetention(retention)}
	if p, ok := s.spec.Params["prefix"]; ok {
		opts = append(opts, redis.WithPrefix(p))
	}
	st := redis.New(rdb, opts...)
	s.d = st
	s.closers = append(s.closers, func(context.Context) error { return st.Close() })
	return nil
}

func (s *Store) openRedlock() error {
	timeout, err := s.spec.duration("node_timeout", 0)
	if err != nil {
		return err
	}
	retention, err := s.spec.duration("fence_retention", redlock.DefaultFenceRetention)
	if err != nil {
		return err
	}
	opts := []redlock.Option{redlock.WithFenceRetention(retention)}
	if timeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(timeout))
	}
	if v, ok := s.spec.Params["drift"]; ok {
		f, err := s.spec.drift(v)
		if err != nil {
			return err
		}
		opts = append(opts, redlock.WithDriftFactor(f))
	}
	if p, ok := s.spec.Params["prefix"]; ok {
		opts = append(opts, redlock.WithPrefix(p))
	}
	clients := make([]goredis.UniversalClient, 0, len(s.spec.Hosts))
	for _, h := range s.spec.Hosts {
		ro, err := s.redisOptions(h)
		if err != nil {
			return err
		}
		rdb := goredis.NewClient(ro)
		clients = append(clients, rdb)
		s.closers = append(s.closers, func(context.Context) error { return rdb.Close() })
	}
	s.d = redlock.New(clients, opts...)
	return nil
}

func (s *Store) openPostgres(ctx context.Context) error {
	opts := []postgres.Option{}
	if v, ok := s.spec.Params["sequence"]; ok {
		opts = append(opts, postgres.WithSequence(v))
	}
	check, err := s.spec.boolean("pooler_check", true)
	if err != nil {
		return err
	}
	setup, err := s.spec.boolean("setup", true)
	if err != nil {
		return err
	}
	sessions, err := s.spec.sessions()
	if err != nil {
		return err
	}
	opts = append(opts, postgres.WithPoolerCheck(check), postgres.WithSetup(setup), postgres.WithSessions(sessions))
	cfg, err := pgxpool.ParseConfig(s.spec.URL.String())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: postgres: %v", driver.ErrUnavailable, err)
	}
	s.closers = append(s.closers, func(context.Context) error { pool.Close(); return nil })
	st := postgres.New(pool, opts...)
	// Closers run last first: the store ends its shared sessions before
	// the pool closes.
	s.closers = append(s.closers, st.Close)
	s.d = st
	return nil
}

func (s *Store) openEtcd() error {
	timeout, err := s.spec.duration("request_timeout", etcd.DefaultRequestTimeout)
	if err != nil {
		return err
	}
	endpoints := make([]string, len(s.spec.Hosts))
	for i, h := range s.spec.Hosts {
		endpoints[i] = (&url.URL{Scheme: "http", Host: h}).String() // escapes an IPv6 zone
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Static flow-control windows turn off gRPC's BDP estimation,
		// which pings etcd after nearly every reply when the calls are
		// small and one at a time, as a lock's are: a packet each way,
		// and wake-ups at both ends, for every call.
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)},
	})
	if err != nil {
		return fmt.Errorf("%w: etcd: %v", driver.ErrUnavailable, err)
	}
	s.closers = append(s.closers, func(context.Context) error { return cli.Close() })
	opts := []etcd.Option{etcd.WithRequestTimeout(timeout)}
	if p, ok := s.spec.Params["prefix"]; ok {
		opts = append(opts, etcd.WithPrefix(p))
	}
	st := etcd.New(cli, opts...)
	// Closers run last first: the store revokes its leases (releasing its
	// locks at once) before the client closes.
	s.closers = append(s.closers, st.Close)
	s.d = st
	return nil
}

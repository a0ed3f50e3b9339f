package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/httpapi"
	"github.com/dlmhq/dlm/server/internal/ratelog"
	"github.com/dlmhq/dlm/server/raftnode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Limits of the client-facing service, beside the lock table's own.
const (
	// MinSessionTTL and MaxSessionTTL bound the TTL a client may ask for
	// its session.
	MinSessionTTL = 100 * time.Millisecond
	MaxSessionTTL = time.Hour
	// DefaultSessionTTL is the TTL of a session that asks for none.
	DefaultSessionTTL = 10 * time.Second
	// DefaultSessionMargin is added to every session's deadline when a
	// node becomes leader (see Config.SessionMargin).
	DefaultSessionMargin = time.Second
	// DefaultMaxStreamQueue is how many messages may wait for a slow
	// client before its stream is ended (the session survives).
	DefaultMaxStreamQueue = 65536
	// DefaultMaxStreamInflight is how many requests of one stream may await
	// their outcome at once; more are not read until earlier ones finish.
	DefaultMaxStreamInflight = 4096
	// DefaultMaxStreamQueueBytes is how many bytes of messages (estimated
	// with StreamMessageOverhead) may wait for a slow client before its
	// stream is ended (the session survives). A single message always fits
	// an empty queue, however large (a session's sync can be).
	DefaultMaxStreamQueueBytes = 4 << 20
	// DefaultMaxQueuedBytes bounds the bytes of messages waiting for their
	// clients across all the streams of a server: a message that would
	// pass it ends its stream as a slow client's.
	DefaultMaxQueuedBytes = 256 << 20
	// StreamMessageOverhead is the memory a queued message is estimated to
	// take beyond its encoded size (proto.Size): the Go structs of the
	// message, its oneof wrapper and request id, and its queue slot.
	StreamMessageOverhead = 256
	// MaxMessageBytes is the largest message a client may send.
	MaxMessageBytes = 64 << 10
)

// Config configures a Server.
type Config struct {
	// Node configures the Raft node.
	Node raftnode.Config
	// Addr is the gRPC listen address; default "127.0.0.1:0" (a free port).
	Addr string
	// HTTPAddr is the HTTP listen address for /healthz, /readyz, /metrics
	// and the JSON listings; empty disables HTTP.
	HTTPAddr string
	// AdvertiseAddr and AdvertiseHTTPAddr are the addresses other nodes
	// give clients for this node (to redirect them to the leader); default
	// the listeners' addresses.
	AdvertiseAddr, AdvertiseHTTPAddr string
	// SessionMargin is added to every session's deadline when this node
	// becomes leader (at start, after a restart, after a fail-over): no
	// session is expired for keepalives it sent to a previous leader or
	// while there was none. Default DefaultSessionMargin.
	SessionMargin time.Duration
	// MaxStreamQueue, MaxStreamQueueBytes and MaxStreamInflight are
	// per-stream limits; defaults DefaultMaxStreamQueue,
	// DefaultMaxStreamQueueBytes and DefaultMaxStreamInflight. A stream
	// whose queue would pass MaxStreamQueue messages or MaxStreamQueueBytes
	// bytes is ended with ResourceExhausted; its session survives.
	MaxStreamQueue      int
	MaxStreamQueueBytes int
	MaxStreamInflight   int
	// MaxQueuedBytes bounds the bytes queued for all the streams of the
	// server together; default DefaultMaxQueuedBytes. A message that would
	// pass it ends its stream with ResourceExhausted.
	MaxQueuedBytes int64
	// MaxWatches bounds the Watch streams open at once on the server, and
	// MaxWatchesPerIdentity those of one authenticated identity (without
	// authentication it does not apply); more are refused with
	// ResourceExhausted. Defaults DefaultMaxWatches and
	// DefaultMaxWatchesPerIdentity.
	MaxWatches, MaxWatchesPerIdentity int
	// MaxEventStreamsPerIdentity bounds the /v1/events streams one
	// authenticated identity may have open at once (more are refused with
	// 429 Too Many Requests); default httpapi.DefaultMaxEventStreamsPerIdentity.
	// Without authentication it does not apply.
	MaxEventStreamsPerIdentity int
	// Logger receives the server's logs (and the node's, unless
	// Node.Logger is set); nil discards them.
	Logger *slog.Logger
	// Pprof serves Go's runtime profiles on the HTTP address under
	// /debug/pprof/ (admin only when authentication is on): for profiling
	// a server under load, off by default.
	Pprof bool

	// TLS, if set, serves gRPC and HTTP over TLS with this configuration
	// (see LoadTLS). If its ClientCAs is set, clients are authenticated by
	// certificate, their identity the subject's common name: gRPC requires
	// a certificate those CAs signed; HTTP verifies one when given (so that
	// health probes and browsers without one can connect) and requires
	// credentials below the TLS layer instead (see Rules).
	TLS *tls.Config
	// Tokens, if set, authenticates clients by bearer token (gRPC metadata
	// and HTTP header "authorization: Bearer <token>"; see Tokens).
	//
	// With Tokens or client certificates, authentication is on: every
	// gRPC call and every HTTP request needs credentials (Unauthenticated,
	// 401), except GET /healthz, /readyz, the dashboard's static files and
	// POST /v1/login; and what each identity may do is decided by Rules
	// (PermissionDenied, 403). Without them, the server is open: anyone who
	// can connect may do anything.
	Tokens *auth.Tokens
	// TokenFloor, if not 0, is the operator's floor of the fencing tokens:
	// whenever this node becomes leader, before it serves, it raises the
	// token sequence through the log so that every token granted after is
	// above TokenFloor (a raise never lowers it). Pass one above every
	// token the cluster issued when restoring an old copy of its state.
	// At most locktable.MaxTokenFloor: Start refuses more.
	TokenFloor uint64
	// TokenRate is the most tokens per second the cluster is assumed to
	// issue, for the margin a new leader adds to the last token (see
	// docs/operations.md, Backups); default DefaultTokenRate.
	TokenRate int64

	// Rules authorize identities when authentication is on; nil grants
	// every authenticated identity every permission (AllowAll). Setting
	// Rules without authentication is an error.
	Rules *auth.Rules
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.SessionMargin <= 0 {
		c.SessionMargin = DefaultSessionMargin
	}
	if c.MaxStreamQueue <= 0 {
		c.MaxStreamQueue = DefaultMaxStreamQueue
	}
	if c.MaxStreamQueueBytes <= 0 {
		c.MaxStreamQueueBytes = DefaultMaxStreamQueueBytes
	}
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxStreamInflight <= 0 {
		c.MaxStreamInflight = DefaultMaxStreamInflight
	}
	if c.MaxWatches <= 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxWatchesPerIdentity <= 0 {
		c.MaxWatchesPerIdentity = DefaultMaxWatchesPerIdentity
	}
	if c.MaxEventStreamsPerIdentity <= 0 {
		c.MaxEventStreamsPerIdentity = httpapi.DefaultMaxEventStreamsPerIdentity
	}
	if c.TokenRate <= 0 {
		c.TokenRate = DefaultTokenRate
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Node.Logger == nil {
		c.Node.Logger = c.Logger
	}
}

// Server is the dlm server: a Raft node serving the DLM gRPC service (and
// HTTP, if configured). Start it with Start and stop it with Close.
type Server struct {
	dlmpb.UnimplementedDLMServer

	cfg     Config
	log     *slog.Logger
	rate    *ratelog.Limiter // the repeated warnings of the leader's loop
	node    *raftnode.Node
	hub     *hub
	watches *watches
	live    *liveness
	metrics *serverMetrics
	auth    *auth.Authenticator
	queue   *queueBudget // bytes queued for all streams
	kas     *keepalives
	health  *health.Server

	grpc     *grpc.Server
	lis      net.Listener
	mux      *listenMux // splits s.lis between gRPC and the session transport
	http     *http.Server
	httpLis  net.Listener
	stop     chan struct{}
	wg       sync.WaitGroup
	closeErr error
	once     sync.Once

	// confirmed is closed when confirmKeepalives has stopped: Close waits
	// for it before closing the node, since Raft never answers a
	// VerifyLeader that reaches it while it shuts down.
	confirmed chan struct{}
}

// keepaliveAck is a keepalive waiting for leadership to be confirmed.
type keepaliveAck struct {
	ka  *dlmpb.KeepAlive
	ttl time.Duration
}

// Start opens the node, listens, and serves until Close. It returns once
// the listeners are open; the server takes requests when the node is the
// leader and has applied its log (see Ready).
func Start(cfg Config) (*Server, error) {
	cfg.setDefaults()
	queue := newQueueBudget(cfg.MaxQueuedBytes)
	s := &Server{
		cfg:    cfg,
		log:    cfg.Logger,
		rate:   ratelog.New(30 * time.Second),
		hub:    newHub(cfg.MaxStreamQueue, int64(cfg.MaxStreamQueueBytes), queue),
		live:   newLiveness(),
		queue:  queue,
		kas:    newKeepalives(),
		health: newHealth(),
		stop:   make(chan struct{}),

		confirmed: make(chan struct{}),
	}
	if err := checkTokenFloor(cfg.TokenFloor); err != nil {
		return nil, err
	}
	s.watches = newWatches(cfg.MaxWatches, cfg.MaxWatchesPerIdentity, s.live.isActive)
	s.metrics = newServerMetrics(s)
	var err error
	s.auth, err = auth.New(auth.Config{Tokens: cfg.Tokens, ClientCerts: cfg.TLS != nil && cfg.TLS.ClientCAs != nil, Rules: cfg.Rules,
		Logger: s.log, Refused: func(kind string) { s.metrics.authRefused.WithLabelValues(kind).Inc() }})
	if err != nil {
		return nil, err
	}
	node, err := raftnode.Open(cfg.Node)
	if err != nil {
		return nil, err
	}
	s.node = node
	node.FSM().SetObserver(s.applied)

	s.lis, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("dlm server: listen: %w", err), node.Close())
	}
	if cfg.HTTPAddr != "" {
		s.httpLis, err = net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("dlm server: listen http: %w", err), s.lis.Close(), node.Close())
		}
	}
	s.grpc = grpc.NewServer(s.grpcOptions()...)
	s.mux = newListenMux(s.lis, s.serveSessionConn)
	dlmpb.RegisterDLMServer(s.grpc, s)
	dlmpb.RegisterLocksServer(s.grpc, unary{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	s.wg.Add(3)
	go s.lead()
	go s.confirmKeepalives()
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(s.mux); err != nil {
			s.log.Error("dlm server: grpc serve", "err", err)
		}
	}()
	if s.httpLis != nil {
		s.http = &http.Server{
			Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second, TLSConfig: s.httpTLS(),
			// TLS handshake failures and the like: routine on a port
			// anyone can reach, so at debug level.
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			var err error
			if s.http.TLSConfig != nil {
				err = s.http.ServeTLS(s.httpLis, "", "")
			} else {
				err = s.http.Serve(s.httpLis)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("dlm server: http serve", "err", err)
			}
		}()
	}
	s.log.Info("dlm server: listening", "grpc", s.Addr(), "http", s.HTTPAddr(), "raft", node.Addr(),
		"tls", cfg.TLS != nil, "raft_tls", cfg.Node.RaftTLS != nil, "auth", s.auth.Enabled())
	return s, nil
}

// grpcOptions are the gRPC server's options: limits, flow control, TLS
// and authentication.
func (s *Server) grpcOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		// Static flow-control windows turn off BDP estimation, whose pings
		// add packets (and wake-ups) to a stream of small messages.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.StatsHandler(deliveryStats{}),
	}
	if s.cfg.TLS != nil {
		c := s.cfg.TLS.Clone()
		if c.ClientCAs != nil {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(c)))
	}
	if s.auth.Enabled() {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.auth.UnaryInterceptor), grpc.ChainStreamInterceptor(s.auth.StreamInterceptor))
	}
	// Strings that are not UTF-8 are refused request by request (after
	// authentication), not as undecodable messages: see utf8Codec.
	opts = append(opts, grpc.ForceServerCodecV2(protocol.NewCodec()), grpc.ChainUnaryInterceptor(protocol.ValidateUnary, reasonTrailer))
	return opts
}

// httpTLS is the HTTP server's TLS configuration, nil without TLS. Client
// certificates are verified when given, not required: credentials are
// checked per request, so that health probes need none.
func (s *Server) httpTLS() *tls.Config {
	if s.cfg.TLS == nil {
		return nil
	}
	c := s.cfg.TLS.Clone()
	if c.ClientCAs != nil {
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return c
}

// Addr returns the gRPC address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// HTTPAddr returns the HTTP address, or "" without HTTP.
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// Node returns the server's Raft node.
func (s *Server) Node() *raftnode.Node { return s.node }

// Ready reports whether the server takes requests: it is the leader, has
// applied its log and has reset the sessions' deadlines.
func (s *Server) Ready() bool { return s.live.isActive() }

// NotReady says why the server does not take requests: "" when it does,
// the storage failure when its log cannot be written (its disk is full or
// failing), else that it is not the leader or has not applied its log.
func (s *Server) NotReady() string {
	if s.Ready() {
		return ""
	}
	if f, ok := s.node.StorageFailure(); ok {
		return "the log cannot be written: " + f.Cause()
	}
	return "not the leader, or the log is not applied yet"
}

// storageRefusal is the error of a request refused because this node's
// storage fails, and the leader (client address, "" if unknown) to name;
// ok is false while the storage writes.
func (s *Server) storageRefusal(leader string) (r *refusal, ok bool) {
	f, ok := s.node.StorageFailure()
	if !ok {
		return nil, false
	}
	msg := "dlm server: this node cannot write its log (" + f.Cause() + "): its disk is full or failing; it serves again once its writes succeed"
	if leader != "" {
		msg += "; the leader serves at " + leader
	}
	return &refusal{code: codes.Unavailable, reason: dlmpb.Reason_REASON_STORAGE, msg: msg}, true
}

// WaitReady waits until Ready or ctx ends.
func (s *Server) WaitReady(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !s.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("dlm server: wait until ready: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Close stops the server: it ends every stream (sessions and locks stay in
// the replicated state, so clients resume them on a restarted or new
// leader within their TTL), stops serving and closes the node.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.health.Shutdown()
		s.hub.endAll(errShutdown)
		s.watches.endAll(errShutdown, true)
		var errs []error
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			errs = append(errs, s.http.Shutdown(ctx))
			cancel()
		}
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			s.grpc.Stop()
			<-stopped
		}
		s.mux.shutdown(2 * time.Second)
		<-s.confirmed
		errs = append(errs, s.node.Close())
		s.wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

var (
	errShutdown  = errors.New("dlm server: shutting down")
	errNotLeader = errors.New("dlm server: no longer the leader")
)

// httpHandler is the server's HTTP API (package httpapi). It also hooks
// the node's apply latency to the metrics, which only HTTP serves.
func (s *Server) httpHandler() http.Handler {
	s.metrics.instrument(s.node)
	locksPattern, locks := s.locksHTTP()
	return httpapi.New(httpapi.Config{
		Service:                    httpService{s},
		Auth:                       s.auth,
		Metrics:                    promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}),
		EventStreams:               s.metrics.eventStreams,
		MaxEventStreamsPerIdentity: s.cfg.MaxEventStreamsPerIdentity,
		Logger:                     s.log,
		Done:                       s.stop,
		Pprof:                      s.cfg.Pprof,
		Handlers:                   map[string]http.Handler{locksPattern: locks},
	})
}

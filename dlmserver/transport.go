package dlmserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/sessionwire"
)

// Transport is how a Store carries its session stream to the server.
// Every other call (List, Status, Watch...) goes over gRPC either way.
type Transport int

const (
	// TransportTCP carries the session's messages framed straight on a
	// TCP (or TLS) connection to the server's client port, without
	// HTTP/2: a round trip costs a fraction of gRPC's (see
	// docs/server.md). It uses WithTLS and the token as gRPC does, but
	// not WithDialOptions. Where something answers at an address but not
	// the session transport (a proxy that carries only gRPC), the session
	// goes over gRPC there. The default.
	TransportTCP Transport = iota
	// TransportGRPC carries the session as the gRPC Session stream, over
	// the store's gRPC connection (with WithDialOptions).
	TransportGRPC
)

// String returns "tcp" or "grpc".
func (t Transport) String() string {
	switch t {
	case TransportTCP:
		return "tcp"
	case TransportGRPC:
		return "grpc"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// WithTransport sets how the session stream is carried; default
// TransportTCP.
func WithTransport(t Transport) Option { return func(o *options) { o.transport = t } }

// MaxSessionFrameBytes bounds a message the store accepts from the server
// over TransportTCP (a session's state after a reconnect is the largest).
const MaxSessionFrameBytes = 64 << 20

// sessionStream is one session stream, over either transport. Send may
// only queue the message: Flush sends what is queued.
type sessionStream interface {
	Send(*dlmpb.SessionRequest) error
	Flush() error
	Recv() (*dlmpb.SessionResponse, error)
	// Trailer returns the stream's trailer once Recv has failed.
	Trailer() metadata.MD
}

// openStream opens a session stream to srv, over gRPC if useGRPC or the
// store's transport says so, that lives until ctx ends.
func (s *Store) openStream(ctx context.Context, srv *server, useGRPC bool) (sessionStream, error) {
	if useGRPC || s.opt.transport == TransportGRPC {
		st, err := srv.client.Session(ctx)
		if err != nil {
			return nil, err
		}
		return grpcStream{st}, nil
	}
	return dialSessionConn(ctx, srv.addr, s.opt.tls, s.opt.token)
}

// grpcStream is the gRPC Session stream, whose Send sends.
type grpcStream struct{ dlmpb.DLM_SessionClient }

// Flush does nothing: Send has sent.
func (grpcStream) Flush() error { return nil }

// sessionConn is a session stream over TransportTCP (package
// sessionwire). Errors are gRPC statuses, as over gRPC, so that the
// store reads them alike.
type sessionConn struct {
	ctx  context.Context
	conn net.Conn
	rd   *sessionwire.Reader // read by one goroutine at a time
	read bool                // a frame came: the session transport is served

	w *sessionwire.Writer

	mu      sync.Mutex
	trailer metadata.MD
}

// dialSessionConn connects to addr and sends the preamble, the TLS
// handshake when tlsCfg is set, and the hello with token, if any. The
// connection is closed when ctx ends.
func dialSessionConn(ctx context.Context, addr string, tlsCfg *tls.Config, token string) (*sessionConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	c := &sessionConn{ctx: ctx, conn: nc}
	context.AfterFunc(ctx, func() { nc.Close() })
	preamble := sessionwire.PreamblePlain
	if tlsCfg != nil {
		preamble = sessionwire.PreambleTLS
	}
	if _, err := nc.Write([]byte(preamble)); err != nil {
		return nil, c.notServed(err)
	}
	if tlsCfg != nil {
		cfg := tlsCfg.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		cfg.NextProtos = nil
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, c.notServed(fmt.Errorf("tls handshake: %w", err))
		}
		c.conn = tc
	}
	c.rd, c.w = sessionwire.NewReader(c.conn, MaxSessionFrameBytes), sessionwire.NewWriter(c.conn)
	hello := &dlmpb.SessionHello{}
	if token != "" {
		hello.Authorization = "Bearer " + token
	}
	if err := c.w.Queue(sessionwire.KindHello, hello); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil // the hello goes with the first Flush
}

// fail returns err as the stream's status: Canceled or DeadlineExceeded
// once ctx has ended, else Unavailable.
func (c *sessionConn) fail(err error) error {
	if c.ctx.Err() != nil {
		return status.FromContextError(c.ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// notServed returns err, met on a connection that was made before any
// frame came back, as a notServedError (unless ctx has ended).
func (c *sessionConn) notServed(err error) error {
	if c.ctx.Err() != nil {
		return c.fail(err)
	}
	return &notServedError{err: err}
}

// notServedError is a connection to a server's address on which nothing
// answered the session transport: a proxy that carries only gRPC, say.
// It is the status Unavailable.
type notServedError struct{ err error }

func (e *notServedError) Error() string {
	return "the session transport got no answer: " + e.err.Error()
}

// GRPCStatus makes the error the status Unavailable.
func (e *notServedError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// Send queues m for the next Flush.
func (c *sessionConn) Send(m *dlmpb.SessionRequest) error {
	return c.ended(c.w.Queue(sessionwire.KindMessage, m))
}

// Flush writes the queued messages.
func (c *sessionConn) Flush() error { return c.ended(c.w.Flush()) }

// ended returns a write error as io.EOF, as gRPC's Send does: the stream
// has ended, and Recv returns its status.
func (c *sessionConn) ended(err error) error {
	if err != nil && c.w.Err() == err {
		return io.EOF
	}
	return err
}

// Recv returns the server's next message. At the stream's end it returns
// io.EOF if the server ended it OK, else the server's status.
func (c *sessionConn) Recv() (*dlmpb.SessionResponse, error) {
	kind, p, err := c.rd.Next()
	switch {
	case err != nil && !c.read:
		return nil, c.notServed(err)
	case err != nil:
		return nil, c.fail(err)
	case !c.read && kind != sessionwire.KindMessage && kind != sessionwire.KindEnd:
		return nil, c.notServed(fmt.Errorf("a frame of unknown kind %q", kind))
	}
	c.read = true
	switch kind {
	case sessionwire.KindMessage:
		m := new(dlmpb.SessionResponse)
		if err := proto.Unmarshal(p, m); err != nil {
			return nil, status.Errorf(codes.Internal, "decode a session message: %v", err)
		}
		return m, nil
	case sessionwire.KindEnd:
		var e dlmpb.SessionEnd
		if err := proto.Unmarshal(p, &e); err != nil {
			return nil, status.Errorf(codes.Internal, "decode the stream's end: %v", err)
		}
		c.mu.Lock()
		c.trailer = metadata.New(e.GetTrailer())
		c.mu.Unlock()
		if e.GetCode() == int32(codes.OK) {
			return nil, io.EOF
		}
		return nil, status.Error(codes.Code(e.GetCode()), e.GetMessage())
	}
	return nil, status.Errorf(codes.Internal, "frame of unknown kind %q", kind)
}

// Trailer returns the trailer the server ended the stream with.
func (c *sessionConn) Trailer() metadata.MD {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trailer
}

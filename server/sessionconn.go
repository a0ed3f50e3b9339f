package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/sessionwire"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/protocol"
)

// endTimeout bounds how long the server waits for a client to take a
// session connection's last frames before closing it.
const endTimeout = time.Second

// serveSessionConn serves the Session stream over a connection of the
// session transport (package sessionwire), which opened with preamble: the
// same handler as over gRPC, with the same authentication. It calls
// serving once the handshake is over, and closes c.
func (s *Server) serveSessionConn(c net.Conn, preamble string, serving func()) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(preambleTimeout))
	st := &sessionConn{conn: c, w: sessionwire.NewWriter(c)}
	fail := func(code codes.Code, msg string) { st.end(status.Error(code, msg)) }
	var state *tls.ConnectionState
	switch {
	case preamble == sessionwire.PreambleTLS && s.cfg.TLS == nil:
		return // a TLS client would not read a plaintext answer
	case preamble == sessionwire.PreambleTLS:
		tc := tls.Server(c, s.sessionTLS())
		if err := tc.Handshake(); err != nil {
			s.log.Debug("dlm server: session connection: tls handshake", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		cs := tc.ConnectionState()
		state = &cs
		st.conn, st.w = tc, sessionwire.NewWriter(tc)
	case s.cfg.TLS != nil:
		fail(codes.Unavailable, "dlm server: this server requires TLS")
		return
	}
	st.rd = sessionwire.NewReader(st.conn, MaxMessageBytes)
	var hello dlmpb.SessionHello
	if err := st.recv(sessionwire.KindHello, &hello); err != nil {
		fail(status.Code(err), "dlm server: session connection: "+status.Convert(err).Message())
		return
	}
	_ = c.SetDeadline(time.Time{})
	serving()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := &peer.Peer{Addr: c.RemoteAddr(), LocalAddr: c.LocalAddr()}
	if state != nil {
		pr.AuthInfo = credentials.TLSInfo{State: *state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	ctx = peer.NewContext(ctx, pr)
	if a := hello.GetAuthorization(); a != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(auth.AuthorizationHeader, a))
	}
	if s.auth.Enabled() {
		var err error
		if ctx, err = s.auth.Authenticate(ctx); err != nil {
			st.end(err)
			return
		}
	}
	st.ctx = ctx
	st.end(s.Session(st))
}

// sessionTLS is the TLS configuration of session connections: gRPC's
// (a client certificate is required when ClientCAs is set).
func (s *Server) sessionTLS() *tls.Config {
	c := s.cfg.TLS.Clone()
	if c.ClientCAs != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c.NextProtos = nil
	return c
}

// sessionConn is the Session stream of a session transport connection:
// dlmpb.DLM_SessionServer over sessionwire frames. Send only queues a
// message; Flush writes what is queued (sendQueued flushes after each
// run), and the stream's end writes what is left.
type sessionConn struct {
	ctx  context.Context
	conn net.Conn
	rd   *sessionwire.Reader // used by one goroutine at a time

	w       *sessionwire.Writer
	mu      sync.Mutex
	trailer metadata.MD
}

var _ dlmpb.DLM_SessionServer = (*sessionConn)(nil)

// Context returns the stream's context: its peer, metadata and principal.
func (c *sessionConn) Context() context.Context { return c.ctx }

// Recv returns the client's next request; io.EOF when it closed its side.
func (c *sessionConn) Recv() (*dlmpb.SessionRequest, error) {
	m := new(dlmpb.SessionRequest)
	if err := c.recv(sessionwire.KindMessage, m); err != nil {
		return nil, err
	}
	return m, nil
}

// recv reads a frame of kind k into m. Errors are statuses as gRPC
// would give, but for io.EOF.
func (c *sessionConn) recv(k sessionwire.Kind, m proto.Message) error {
	kind, p, err := c.rd.Next()
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, sessionwire.ErrTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, err.Error())
	case kind != k:
		return status.Errorf(codes.InvalidArgument, "frame of kind %q where %q was expected", kind, k)
	}
	if err := protocol.Decode(p, m); err != nil {
		return status.Errorf(codes.Internal, "decode %T: %v", m, err)
	}
	return nil
}

// Send queues m for the next Flush.
func (c *sessionConn) Send(m *dlmpb.SessionResponse) error {
	return c.unavailable(c.w.Queue(sessionwire.KindMessage, m))
}

// Flush writes the queued messages.
func (c *sessionConn) Flush() error { return c.unavailable(c.w.Flush()) }

// unavailable returns a write error as the status Unavailable.
func (c *sessionConn) unavailable(err error) error {
	if err != nil && c.w.Err() == err {
		return status.Error(codes.Unavailable, err.Error())
	}
	return err
}

// end writes what is queued and the stream's end, err's status, giving
// the client endTimeout to take them.
func (c *sessionConn) end(err error) {
	_ = c.conn.SetWriteDeadline(time.Now().Add(endTimeout)) // also ends a Flush stuck on a client that does not read
	st := status.Convert(err)
	e := &dlmpb.SessionEnd{Code: int32(st.Code()), Message: st.Message()}
	c.mu.Lock()
	for k, v := range c.trailer {
		if len(v) > 0 {
			if e.Trailer == nil {
				e.Trailer = make(map[string]string, len(c.trailer))
			}
			e.Trailer[k] = v[len(v)-1]
		}
	}
	c.mu.Unlock()
	if c.w.Queue(sessionwire.KindEnd, e) == nil {
		_ = c.w.Flush()
	}
}

// cutWrites makes a write in progress, and any before end, fail at once.
func (c *sessionConn) cutWrites() { _ = c.conn.SetWriteDeadline(time.Unix(1, 0)) }

// SetTrailer sets metadata sent with the stream's end.
func (c *sessionConn) SetTrailer(md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trailer = metadata.Join(c.trailer, md)
}

// SetHeader and SendHeader do nothing: the transport has no headers.
func (c *sessionConn) SetHeader(metadata.MD) error  { return nil }
func (c *sessionConn) SendHeader(metadata.MD) error { return nil }

// SendMsg and RecvMsg are Send and Recv for grpc.ServerStream.
func (c *sessionConn) SendMsg(m any) error {
	r, ok := m.(*dlmpb.SessionResponse)
	if !ok {
		return fmt.Errorf("dlm server: session connection: cannot send %T", m)
	}
	return c.Send(r)
}

func (c *sessionConn) RecvMsg(m any) error {
	r, ok := m.(*dlmpb.SessionRequest)
	if !ok {
		return fmt.Errorf("dlm server: session connection: cannot receive into %T", m)
	}
	return c.recv(sessionwire.KindMessage, r)
}

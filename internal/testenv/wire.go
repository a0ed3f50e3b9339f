package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/sessionwire"
)

// Wire is a client of the dlm server's session transport written from its
// description in api/dlm.proto, as a client in another language would:
// for tests and tools (dlmserver is the client to use). Each Send is one
// write; one goroutine sends, another may receive.
type Wire struct {
	Conn    net.Conn
	rd      *sessionwire.Reader
	trailer map[string]string
}

// DialWireRaw connects to addr and sends preamble ("" for nothing), no
// more: for what a client may get wrong. The connection closes when ctx
// ends.
func DialWireRaw(ctx context.Context, addr, preamble string) (*Wire, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { c.Close() })
	if _, err := c.Write([]byte(preamble)); err != nil {
		c.Close()
		return nil, err
	}
	return &Wire{Conn: c, rd: sessionwire.NewReader(c, 64<<20)}, nil
}

// DialWire connects to addr, over TLS with cfg if it is not nil (its
// ServerName defaulting to addr's host), and sends the hello with
// authorization ("Bearer <token>", or "" for none).
func DialWire(ctx context.Context, addr string, cfg *tls.Config, authorization string) (*Wire, error) {
	preamble := sessionwire.PreamblePlain
	if cfg != nil {
		preamble = sessionwire.PreambleTLS
	}
	w, err := DialWireRaw(ctx, addr, preamble)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		cfg = cfg.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(w.Conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			w.Conn.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		w.Conn, w.rd = tc, sessionwire.NewReader(tc, 64<<20)
	}
	if err := w.Frame(sessionwire.KindHello, &dlmpb.SessionHello{Authorization: authorization}); err != nil {
		w.Conn.Close()
		return nil, err
	}
	return w, nil
}

// Frame sends one frame of kind k holding m.
func (w *Wire) Frame(k sessionwire.Kind, m proto.Message) error {
	b, err := sessionwire.Append(nil, k, m)
	if err == nil {
		_, err = w.Conn.Write(b)
	}
	return err
}

// Send sends a request of the session stream.
func (w *Wire) Send(m *dlmpb.SessionRequest) error { return w.Frame(sessionwire.KindMessage, m) }

// Recv returns the server's next message. At the stream's end it returns
// io.EOF if the server ended it OK, else the server's status.
func (w *Wire) Recv() (*dlmpb.SessionResponse, error) {
	k, p, err := w.rd.Next()
	if err != nil {
		return nil, err
	}
	switch k {
	case sessionwire.KindMessage:
		m := new(dlmpb.SessionResponse)
		return m, proto.Unmarshal(p, m)
	case sessionwire.KindEnd:
		var e dlmpb.SessionEnd
		if err := proto.Unmarshal(p, &e); err != nil {
			return nil, err
		}
		w.trailer = e.GetTrailer()
		if e.GetCode() == int32(codes.OK) {
			return nil, io.EOF
		}
		return nil, status.Error(codes.Code(e.GetCode()), e.GetMessage())
	}
	return nil, errors.New("frame of unknown kind")
}

// Trailer returns the trailer of the stream's end, once Recv has met it.
func (w *Wire) Trailer() map[string]string { return w.trailer }

// Close closes the connection.
func (w *Wire) Close() error { return w.Conn.Close() }

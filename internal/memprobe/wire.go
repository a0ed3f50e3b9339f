package main

import (
	"context"
	"errors"
	"net"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/sessionwire"
)

// stream is a session stream, over gRPC or the session transport.
type stream interface {
	Send(*dlmpb.SessionRequest) error
	Recv() (*dlmpb.SessionResponse, error)
}

// wire is a session stream over the session transport (plaintext); one
// goroutine sends, another receives.
type wire struct {
	conn net.Conn
	rd   *sessionwire.Reader
	buf  []byte
}

// dialWire connects to addr and sends the preamble and hello; the
// connection closes when ctx ends.
func dialWire(ctx context.Context, addr string) (*wire, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { c.Close() })
	w := &wire{conn: c, rd: sessionwire.NewReader(c, 64<<20)}
	b, err := sessionwire.Append([]byte(sessionwire.PreamblePlain), sessionwire.KindHello, &dlmpb.SessionHello{})
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *wire) Send(m *dlmpb.SessionRequest) error {
	var err error
	if w.buf, err = sessionwire.Append(w.buf[:0], sessionwire.KindMessage, m); err != nil {
		return err
	}
	_, err = w.conn.Write(w.buf)
	return err
}

func (w *wire) Recv() (*dlmpb.SessionResponse, error) {
	k, p, err := w.rd.Next()
	if err != nil {
		return nil, err
	}
	if k != sessionwire.KindMessage {
		var e dlmpb.SessionEnd
		_ = proto.Unmarshal(p, &e)
		return nil, errors.New("stream ended: " + e.GetMessage())
	}
	m := new(dlmpb.SessionResponse)
	return m, proto.Unmarshal(p, m)
}

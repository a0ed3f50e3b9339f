package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/api/sessionwire"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
	"github.com/dlmhq/dlm/server/internal/servertest"
	"github.com/dlmhq/dlm/server/raftnode"
)

// wireSession is testenv's client of the session transport, written from
// its description, as a dlmpb.DLM_SessionClient, so that rawSession drives
// it like a gRPC stream.
type wireSession struct {
	grpc.ClientStream // not used: the methods of Wire are
	*testenv.Wire
}

// dialPreamble connects to addr and sends preamble ("" for nothing), no more.
func dialPreamble(t testing.TB, addr, preamble string) *wireSession {
	t.Helper()
	w, err := testenv.DialWireRaw(t.Context(), addr, preamble)
	if err != nil {
		t.Fatal(err)
	}
	return &wireSession{Wire: w}
}

// dialWire connects to addr (over TLS with c, if not nil) and sends the
// hello with authorization ("" for none).
func dialWire(t testing.TB, addr string, c *tls.Config, authorization string) *wireSession {
	t.Helper()
	w, err := testenv.DialWire(t.Context(), addr, c, authorization)
	if err != nil {
		t.Fatal(err)
	}
	return &wireSession{Wire: w}
}

// frame sends one frame holding m.
func (w *wireSession) frame(t testing.TB, k sessionwire.Kind, m proto.Message) {
	t.Helper()
	if err := w.Frame(k, m); err != nil {
		t.Fatal(err)
	}
}

func (w *wireSession) write(t testing.TB, b []byte) {
	t.Helper()
	if _, err := w.Conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

// Trailer returns the trailer of the stream's end as gRPC metadata.
func (w *wireSession) Trailer() metadata.MD { return metadata.New(w.Wire.Trailer()) }

// openWire opens a session over w, as open does over gRPC.
func openWire(t *testing.T, w *wireSession) *rawSession {
	t.Helper()
	r := &rawSession{t: t, stream: w, cancel: func() {}}
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(5 * time.Second), Label: t.Name()}}})
	o := r.recv().GetOpened()
	if o == nil {
		t.Fatal("no SessionOpened")
	}
	r.sid, r.token = o.GetSession(), o.GetResumeToken()
	if r.recv().GetSync() == nil {
		t.Fatal("no SessionSync after SessionOpened")
	}
	return r
}

// endOf reads w until its end and returns it.
func endOf(t *testing.T, w *wireSession) error {
	t.Helper()
	for {
		if _, err := w.Recv(); err != nil {
			return err
		}
	}
}

// A session over the transport is the session of the gRPC stream: the
// same grants, tokens and queue, side by side with a gRPC client, and a
// clean end when the client closes it.
func TestSessionTransport(t *testing.T) {
	s := startServer(t, Config{})
	r := openWire(t, dialWire(t, s.Addr(), nil, ""))
	g, _ := open(t, s, 0, 5*time.Second)

	seq := r.lock("wire/a", dlmpb.Mode_MODE_EX)
	first := r.granted(seq)
	wait := g.lock("wire/a", dlmpb.Mode_MODE_EX)
	if m := g.recvSkipAcks(); m.GetQueued() == nil {
		t.Fatalf("the gRPC client's request: %v, want Queued behind the transport's lock", m)
	}
	r.release(first.GetLockId())
	var second *dlmpb.Granted
	if m := g.recvSkipAcks(); m.GetGranted() == nil || m.GetGranted().GetLockId() == 0 {
		t.Fatalf("the gRPC client's request %d: %v, want Granted once the transport's lock is released", wait, m)
	} else {
		second = m.GetGranted()
	}
	if second.GetToken() <= first.GetToken() {
		t.Fatalf("token %d after %d: tokens must grow across transports", second.GetToken(), first.GetToken())
	}

	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
	if err := endOf(t, r.stream.(*wireSession)); !errors.Is(err, io.EOF) {
		t.Fatalf("end of a closed session: %v, want OK", err)
	}
}

// Frames out of place or too large end the connection with a status that
// says why; the server serves on.
func TestSessionTransportRefusals(t *testing.T) {
	s := startServer(t, Config{})
	t.Run("message before hello", func(t *testing.T) {
		w := dialPreamble(t, s.Addr(), sessionwire.PreamblePlain)
		w.frame(t, sessionwire.KindMessage, &dlmpb.SessionRequest{})
		wantCode(t, endOf(t, w), codes.InvalidArgument, "a message before the hello")
	})
	t.Run("first message not an open", func(t *testing.T) {
		w := dialWire(t, s.Addr(), nil, "")
		if err := w.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{}}}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, endOf(t, w), codes.InvalidArgument, "a keepalive before the open")
	})
	t.Run("frame over the limit", func(t *testing.T) {
		w := dialWire(t, s.Addr(), nil, "")
		r := openWire(t, w)
		var h [sessionwire.HeaderLen]byte
		h[0] = byte(sessionwire.KindMessage)
		binary.BigEndian.PutUint32(h[1:], MaxMessageBytes+1)
		w.write(t, h[:]) // the payload never comes: the length alone is refused
		wantCode(t, endOf(t, w), codes.ResourceExhausted, "a frame over the limit")
		if r.sid == 0 {
			t.Fatal("no session")
		}
	})
	t.Run("plaintext to a TLS server", func(t *testing.T) {
		pki := servertest.NewPKI(t)
		ts := startServer(t, Config{TLS: pki.ServerTLS(t, false)})
		err := endOf(t, dialPreamble(t, ts.Addr(), sessionwire.PreamblePlain))
		wantCode(t, err, codes.Unavailable, "a plaintext session on a TLS server")
		if !strings.Contains(err.Error(), "TLS") {
			t.Fatalf("%v does not say that TLS is required", err)
		}
	})
	// Still serving, and gRPC beside it.
	openWire(t, dialWire(t, s.Addr(), nil, ""))
	open(t, s, 0, time.Second)
}

// A node that does not lead refuses a session as over gRPC: Unavailable,
// with the leader it knows (none here) in the trailer.
func TestSessionTransportOffLeader(t *testing.T) {
	s, err := Start(Config{Node: raftnode.Config{ID: "lone", InMemory: true, Join: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := dialWire(t, s.Addr(), nil, "")
	if err := w.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{}}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, endOf(t, w), codes.Unavailable, "a session on a node that does not lead")
	if _, ok := w.Trailer()[cluster.LeaderHeader]; !ok {
		t.Fatalf("trailer %v has no %s", w.Trailer(), cluster.LeaderHeader)
	}
}

// Over TLS, the transport authenticates as gRPC does: by client
// certificate, or by the bearer token of the hello; the rules apply; and
// the token stays out of what the server stores.
func TestSessionTransportAuthentication(t *testing.T) {
	pki := servertest.NewPKI(t, "alice")
	tok := newToken(t)
	tokens, err := auth.ParseTokens(strings.NewReader("bob " + tok + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := auth.ParseRules(strings.NewReader("alice lock a/\nbob lock b/\nbob list *\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{TLS: pki.ServerTLS(t, true), Tokens: tokens, Rules: rules})

	alice := openWire(t, dialWire(t, s.Addr(), pki.ClientTLS(t, "alice"), ""))
	alice.granted(alice.lock("a/1", dlmpb.Mode_MODE_EX))
	alice.refusal(alice.lock("b/1", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_PERMISSION_DENIED)

	// bob's certificate is not alice's: his token names him.
	bob := openWire(t, dialWire(t, s.Addr(), pki.ClientTLS(t, "alice"), "Bearer "+tok))
	bob.seq++
	bob.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Session: bob.sid, Seq: bob.seq}, Resource: "b/1", Mode: dlmpb.Mode_MODE_EX, Owner: 1,
		Metadata: []byte("token " + tok)}}})
	bob.granted(bob.seq)
	bob.refusal(bob.lock("a/1", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_PERMISSION_DENIED)
	res, err := dialGRPC(t, s.Addr(), pki.ClientTLS(t, "alice")).List(bearer(context.Background(), tok), &dlmpb.ListRequest{Prefix: "b/1"})
	if err != nil {
		t.Fatal(err)
	}
	if md := res.GetResources()[0].GetHolders()[0].GetMetadata(); strings.Contains(md, tok) {
		t.Fatalf("the token was stored in the lock's metadata: %q", md)
	}

	w := dialWire(t, s.Addr(), pki.ClientTLS(t, "alice"), "Bearer wrong-"+tok)
	if err := w.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{}}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, endOf(t, w), codes.Unauthenticated, "an unknown token")

	// Without a client certificate the handshake itself fails.
	c := pki.ClientTLS(t, "")
	c.ServerName = "127.0.0.1"
	tc := tls.Client(dialPreamble(t, s.Addr(), sessionwire.PreambleTLS).Conn, c)
	err = tc.Handshake()
	if err == nil {
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil {
		t.Fatal("a TLS session without a client certificate was served")
	}
}

// Close ends every connection of the client port, those still silent and
// those serving a session, and leaves no goroutine of them behind.
func TestSessionTransportShutdown(t *testing.T) {
	s := startServer(t, Config{})
	silent := dialPreamble(t, s.Addr(), "").Conn                       // sends nothing
	hello := dialPreamble(t, s.Addr(), sessionwire.PreamblePlain).Conn // a preamble, then nothing
	r := openWire(t, dialWire(t, s.Addr(), nil, ""))
	r.granted(r.lock("x", dlmpb.Mode_MODE_EX))

	var wg sync.WaitGroup
	for _, c := range []net.Conn{silent, hello, r.stream.(*wireSession).Conn} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(io.Discard, c) // returns when the server closes c
		}()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// A session connection whose client does not read ends as soon as its
// outbox gives up on it (a slow client, a stream replaced): the write that
// waits for the client is cut at once, and the handler returns.
func TestSessionConnCutsAWriteThatWaits(t *testing.T) {
	srv, cli := net.Pipe() // unbuffered: a write waits for a read that never comes
	defer cli.Close()
	s := &Server{}
	ob := newOutbox(1, 100, 1<<20, newQueueBudget(1<<20))
	c := &sessionConn{ctx: context.Background(), conn: srv, w: sessionwire.NewWriter(srv)}
	ended := make(chan error, 1)
	go func() { ended <- s.writeInline(context.Background(), c, ob) }()
	ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Closed{Closed: &dlmpb.SessionClosed{Session: 1}}})
	// The message is on its way: the writer waits in the pipe's Write.
	first := make([]byte, 1)
	if _, err := io.ReadFull(cli, first); err != nil || sessionwire.Kind(first[0]) != sessionwire.KindMessage {
		t.Fatalf("first byte %q, %v: want a message frame", first, err)
	}
	ob.end(false, errSlowClient)
	select {
	case err := <-ended:
		wantCode(t, err, codes.ResourceExhausted, "the stream of a client that stopped reading")
	case <-time.After(20 * time.Second): // "never" rather than "late"
		t.Fatal("the handler still waits on a client that does not read")
	}
	s.wg.Wait()
}

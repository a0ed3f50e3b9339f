package server

// Fuzz targets for what reaches the service from the network: client
// requests (protocol.RequestCommand, and the session stream of a running server).
// `go test` runs their seed corpora; scripts/fuzz.sh fuzzes each for a
// while. The state machine's are in package fsm.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/raftnode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// fuzzFrames encodes session requests as FuzzSessionStream reads them: each
// a varint length and that many bytes.
func fuzzFrames(tb testing.TB, ms ...*dlmpb.SessionRequest) []byte {
	var out []byte
	for _, m := range ms {
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		out = protowire.AppendBytes(out, b)
	}
	return out
}

// parseFrames decodes up to max frames written by fuzzFrames, skipping those
// that are not session requests; a last frame cut short is taken whole.
func parseFrames(data []byte, max int) []*dlmpb.SessionRequest {
	var out []*dlmpb.SessionRequest
	for len(data) > 0 && len(out) < max {
		b, n := protowire.ConsumeBytes(data)
		if n < 0 {
			b, n = data, len(data)
		}
		data = data[n:]
		var m dlmpb.SessionRequest
		if proto.Unmarshal(b, &m) == nil {
			out = append(out, &m)
		}
	}
	return out
}

// FuzzSessionStream sends arbitrary requests on a session stream of a real
// in-process server (its Session handler, fed through an in-memory stream
// as gRPC would feed it decoded messages: the network transport would only
// add noise to the coverage the fuzzer follows). The first request may be an
// open of any kind: it is answered with the session, SessionExpired, or a
// clear error status. On an open session every request is answered once (a
// refusal with a reason for nonsense), a close ends the stream with
// SessionClosed, and the server then still grants a lock to a new session.
func FuzzSessionStream(f *testing.F) {
	reqs := servertest.SessionRequests()
	openReq := func(sid uint64, ttl *durationpb.Duration, label string) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Session: sid, Ttl: ttl, Label: label}}}
	}
	f.Add(fuzzFrames(f, reqs...))
	f.Add(fuzzFrames(f, append([]*dlmpb.SessionRequest{openReq(0, durationpb.New(time.Second), "fuzz")}, reqs[:12]...)...))
	f.Add(fuzzFrames(f, openReq(12345, nil, "")))
	f.Add(fuzzFrames(f, openReq(0, &durationpb.Duration{Seconds: -1}, "")))
	f.Add(fuzzFrames(f, openReq(0, durationpb.New(time.Millisecond), "")))
	f.Add(fuzzFrames(f, openReq(0, nil, string(make([]byte, raftnode.DefaultMaxNameLen+1)))))
	f.Add(fuzzFrames(f, reqs[0], openReq(0, nil, ""), reqs[1]))
	f.Add(fuzzFrames(f, reqs[0], &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}}, reqs[1]))

	s := startServer(f, Config{})
	canary := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs := parseFrames(data, 64)
		if len(msgs) == 0 || msgs[0].GetOpen() == nil {
			msgs = append([]*dlmpb.SessionRequest{openReq(0, durationpb.New(5*time.Second), "fuzz")}, msgs...)
		}
		fuzzStream(t, s, msgs)
		canary++
		checkServes(t, s, fmt.Sprintf("fuzz/canary/%d", canary))
	})
}

// memStream is a session stream in memory: the client's side of it sends
// requests to Server.Session and receives its answers, then its status.
type memStream struct {
	grpc.ServerStream // not used: the methods below are all Session calls
	ctx               context.Context
	in                chan *dlmpb.SessionRequest // closed by CloseSend
	out               chan *dlmpb.SessionResponse
	done              chan error // Session's return value
	cancel            context.CancelFunc
}

// openMem runs s.Session on a new memStream until it returns or t ends.
func openMem(t *testing.T, s *Server) *memStream {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	m := &memStream{ctx: ctx, cancel: cancel, in: make(chan *dlmpb.SessionRequest),
		out: make(chan *dlmpb.SessionResponse), done: make(chan error, 1)}
	t.Cleanup(cancel)
	go func() {
		err := s.Session(m)
		cancel() // as gRPC ends the stream's context when the handler returns
		m.done <- err
	}()
	return m
}

func (m *memStream) Context() context.Context     { return m.ctx }
func (m *memStream) SetTrailer(metadata.MD)       {}
func (m *memStream) SetHeader(metadata.MD) error  { return nil }
func (m *memStream) SendHeader(metadata.MD) error { return nil }

// Recv is the server's receive.
func (m *memStream) Recv() (*dlmpb.SessionRequest, error) {
	select {
	case r, ok := <-m.in:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-m.ctx.Done():
		return nil, status.FromContextError(m.ctx.Err()).Err()
	}
}

// Send is the server's send.
func (m *memStream) Send(r *dlmpb.SessionResponse) error {
	select {
	case m.out <- r:
		return nil
	case <-m.ctx.Done():
		return status.FromContextError(m.ctx.Err()).Err()
	}
}

// send is the client's send: false once the server no longer reads.
func (m *memStream) send(r *dlmpb.SessionRequest) bool {
	select {
	case m.in <- r:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// recv is the client's receive: the next answer, or the stream's status
// (io.EOF for a handler that returned nil) once it has ended.
func (m *memStream) recv() (*dlmpb.SessionResponse, error) {
	select {
	case r := <-m.out:
		return r, nil
	case err := <-m.done:
		m.done <- err // every later recv ends the same way
		if err == nil {
			return nil, io.EOF
		}
		return nil, err
	}
}

// fuzzStream opens a stream with msgs[0], an open, sends the rest up to the
// next open or close, then that one (or a close), and checks the answers.
func fuzzStream(t *testing.T, s *Server, msgs []*dlmpb.SessionRequest) {
	t.Helper()
	st := openMem(t, s)
	st.send(msgs[0])
	first, err := st.recv()
	if err != nil {
		c := status.Code(err)
		resume := msgs[0].GetOpen().GetSession() != 0 // of a session whose resume token the fuzzer does not have
		if c != codes.InvalidArgument && c != codes.ResourceExhausted && (c != codes.PermissionDenied || !resume) {
			t.Fatalf("open %v: %v, want InvalidArgument or ResourceExhausted (PermissionDenied for a resume)", msgs[0], err)
		}
		return
	}
	if exp := first.GetExpired(); exp != nil {
		if want := msgs[0].GetOpen().GetSession(); want == 0 || exp.GetSession() != want {
			t.Fatalf("open %v: expired %v", msgs[0], exp)
		}
		return
	}
	sid := first.GetOpened().GetSession()
	if sid == 0 {
		t.Fatalf("open %v: first answer %v", msgs[0], first)
	}
	if sync, err := st.recv(); err != nil || sync.GetSync().GetSession() != sid {
		t.Fatalf("after SessionOpened: %v, %v; want the session's sync", sync, err)
	}
	// A resumed session may still get answers to requests of its previous
	// stream: count the answers of new sessions only.
	resumed := msgs[0].GetOpen().GetSession() != 0
	requests := 0
	last := &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}}
	sending := make(chan struct{})
	go func() { // the server reads as it pleases; answers are read below meanwhile
		defer close(sending)
		for _, m := range msgs[1:] {
			if m.GetOpen() != nil || m.GetClose() != nil {
				last = m
				break
			}
			if m.GetKeepAlive() == nil {
				requests++
			}
			if !st.send(m) {
				return
			}
		}
		st.send(last)
	}()
	answered := 0
	for {
		m, err := st.recv()
		if err != nil {
			<-sending
			switch {
			case last.GetOpen() != nil && status.Code(err) == codes.InvalidArgument:
			case errors.Is(err, io.EOF):
				t.Fatalf("the stream ended without SessionClosed or SessionExpired")
			default:
				t.Fatalf("stream: %v", err)
			}
			return
		}
		if r := m.GetRefused(); r != nil && (r.GetReason() == dlmpb.Reason_REASON_UNSPECIFIED || r.GetMessage() == "") {
			t.Fatalf("refusal without a reason or message: %v", m)
		}
		if id := servertest.AnswerID(m); id != nil {
			answered++
			if id.GetSession() != sid {
				t.Fatalf("session %d got an answer for session %d: %v", sid, id.GetSession(), m)
			}
		}
		switch {
		case m.GetExpired() != nil:
			return // a session of a tiny TTL: answers may be cut short
		case m.GetClosed() != nil:
			<-sending
			if !resumed && answered != requests {
				t.Fatalf("%d answers to %d requests", answered, requests)
			}
			if _, err := st.recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("after SessionClosed: %v, want the stream's end", err)
			}
			return
		}
	}
}

// checkServes opens a session, takes an exclusive lock on the free resource
// name and closes the session.
func checkServes(t *testing.T, s *Server, name string) {
	t.Helper()
	st := openMem(t, s)
	recv := func() *dlmpb.SessionResponse {
		m, err := st.recv()
		if err != nil {
			t.Fatalf("the server no longer serves: %v", err)
		}
		return m
	}
	st.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(5 * time.Second)}}})
	sid := recv().GetOpened().GetSession()
	recv() // the sync
	st.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Session: sid, Seq: 1}, Resource: name, Mode: dlmpb.Mode_MODE_EX, NoQueue: true}}})
	if g := recv().GetGranted(); g == nil || g.GetToken() == 0 {
		t.Fatalf("no grant of the free resource %q", name)
	}
	st.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
	for recv().GetClosed() == nil {
	}
}

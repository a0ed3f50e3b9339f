package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Tests of the attacks of issue 17: each drives the server the way the
// attacker did, with raw gRPC messages through api/dlmpb.

// --- Issue 17, items 7-8: server-side checks of every client limit; error messages ---

// rawBytes is a message already encoded, sent as is by rawCodec: how an
// attacker sends what the generated code would refuse to encode.
type rawBytes []byte

// rawCodec sends rawBytes unchanged and encodes and decodes proto messages
// as usual, without checking UTF-8 on the way out.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// withRaw encodes m, whose string fields hold placeholder, with raw (of the
// same length) in its place: invalid UTF-8 that proto.Marshal refuses.
func withRaw(t *testing.T, m proto.Message, placeholder, raw string) rawBytes {
	t.Helper()
	if len(placeholder) != len(raw) {
		t.Fatalf("placeholder %q and raw %q differ in length", placeholder, raw)
	}
	b, err := proto.Marshal(m)
	if err != nil || !bytes.Contains(b, []byte(placeholder)) {
		t.Fatalf("encode %v: %v", m, err)
	}
	return bytes.ReplaceAll(b, []byte(placeholder), []byte(raw))
}

// rawStream opens a session stream that sends raw bytes: the open request,
// then whatever the test sends.
type rawStream struct {
	t  *testing.T
	cs grpc.ClientStream
}

func dialRaw(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newRawStream(t *testing.T, s *Server, first rawBytes) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cs, err := dialRaw(t, s).NewStream(ctx, &dlmpb.DLM_ServiceDesc.Streams[0], dlmpb.DLM_Session_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawStream{t: t, cs: cs}
	r.send(first)
	return r
}

func (r *rawStream) send(b rawBytes) {
	r.t.Helper()
	if err := r.cs.SendMsg(b); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next message that is not a keepalive ack, or the
// stream's error.
func (r *rawStream) recv() (*dlmpb.SessionResponse, error) {
	for {
		m := &dlmpb.SessionResponse{}
		if err := r.cs.RecvMsg(m); err != nil {
			return nil, err
		}
		if m.GetKeepAliveAck() == nil {
			return m, nil
		}
	}
}

func encode(t *testing.T, m proto.Message) rawBytes {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func lockMsg(seq uint64, resource string, mode dlmpb.Mode) *dlmpb.SessionRequest {
	return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Seq: seq}, Resource: resource, Mode: mode, Owner: seq,
	}}}
}

// wantRefusal fails unless m refuses request seq with reason, its message
// containing every one of want.
func wantRefusal(t *testing.T, m *dlmpb.SessionResponse, seq uint64, reason dlmpb.Reason, want ...string) {
	t.Helper()
	ref := m.GetRefused()
	if ref == nil || ref.GetId().GetSeq() != seq || ref.GetReason() != reason {
		t.Fatalf("want Refused %v for request %d, got %v", reason, seq, m)
	}
	for _, w := range want {
		if !strings.Contains(ref.GetMessage(), w) {
			t.Fatalf("refusal of request %d: message %q does not say %q", seq, ref.GetMessage(), w)
		}
	}
}

// TestAttackSemaphoreLimits: a semaphore of 4294967295 permits was granted;
// the server now checks what the Go client checks (capacity in [1,
// MaxCapacity], permits in [1, capacity], a mode or a capacity), naming the
// value sent.
func TestAttackSemaphoreLimits(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r, _ := open(t, s, 0, 10*time.Second)
	sem := func(capacity, permits uint32) func(*dlmpb.LockRequest) {
		return func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = capacity, permits }
	}
	cases := []struct {
		name string
		mode dlmpb.Mode
		mut  func(*dlmpb.LockRequest)
		want string
	}{
		{"capacity 2^32-1", 0, sem(math.MaxUint32, 1), "capacity 4294967295"},
		{"capacity over MaxCapacity", 0, sem(MaxCapacity+1, 1), fmt.Sprint("capacity ", MaxCapacity+1)},
		{"no permits", 0, sem(4, 0), "0 permits"},
		{"permits over capacity", 0, sem(4, 5), "5 permits"},
		{"permits without capacity", dlmpb.Mode_MODE_EX, sem(0, 3), "3 permits"},
		{"neither mode nor capacity", 0, nil, "mode"},
	}
	for _, c := range cases {
		var muts []func(*dlmpb.LockRequest)
		if c.mut != nil {
			muts = append(muts, c.mut)
		}
		seq := r.lock("sem/"+c.name, c.mode, muts...)
		m := r.refusal(seq, dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%s: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 0 || st.GetLocks() != 0 {
		t.Fatalf("refused requests left %d resources, %d locks", st.GetResources(), st.GetLocks())
	}
	// The largest semaphore is still granted.
	r.granted(r.lock("sem/max", 0, sem(MaxCapacity, MaxCapacity)))
}

// TestAttackOtherClientLimits: the lease TTL a lock request carries, and its
// wait, are checked as the Go client checks them; bad durations are refused
// for that request only.
func TestAttackOtherClientLimits(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r, _ := open(t, s, 0, 10*time.Second)
	ttl := func(d *durationpb.Duration) func(*dlmpb.LockRequest) {
		return func(l *dlmpb.LockRequest) { l.Ttl = d }
	}
	cases := []struct {
		name string
		mut  func(*dlmpb.LockRequest)
		want string
	}{
		{"negative ttl", ttl(durationpb.New(-time.Second)), "ttl -1s"},
		{"ttl under MinLockTTL", ttl(durationpb.New(time.Millisecond)), "ttl 1ms"},
		{"ttl over MaxLockTTL", ttl(durationpb.New(MaxLockTTL + time.Hour)), "ttl 25h"},
		{"malformed ttl", ttl(&durationpb.Duration{Seconds: 1, Nanos: -1}), "ttl"},
		{"malformed wait", func(l *dlmpb.LockRequest) { l.Wait = &durationpb.Duration{Seconds: -1, Nanos: 1} }, "wait"},
		{"empty name", func(l *dlmpb.LockRequest) { l.Resource = "" }, "empty"},
		{"metadata too long", func(l *dlmpb.LockRequest) { l.Metadata = make([]byte, MaxMetadataBytes+1) }, fmt.Sprint(MaxMetadataBytes+1, " bytes")},
	}
	for _, c := range cases {
		m := r.refusal(r.lock("limits", dlmpb.Mode_MODE_EX, c.mut), dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%s: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	r.granted(r.lock("limits", dlmpb.Mode_MODE_EX, ttl(durationpb.New(MaxLockTTL))))
}

// TestAttackModesNamed: modes 7, -1 and 99999 were refused as "invalid lock
// mode: 0"; the refusal now names the value sent, in lock and convert
// requests.
func TestAttackModesNamed(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r, _ := open(t, s, 0, 10*time.Second)
	g := r.granted(r.lock("modes/held", dlmpb.Mode_MODE_NL))
	for _, mode := range []dlmpb.Mode{7, -1, 99999} {
		want := fmt.Sprintf("mode %d", int32(mode))
		m := r.refusal(r.lock("modes/new", mode), dlmpb.Reason_REASON_INVALID_MODE)
		if !strings.Contains(m.GetMessage(), want) {
			t.Errorf("lock in mode %d: refusal %q does not say %q", int32(mode), m.GetMessage(), want)
		}
		r.seq++
		r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
			Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: g.GetLockId(), Mode: mode}}})
		m = r.refusal(r.seq, dlmpb.Reason_REASON_INVALID_MODE)
		if !strings.Contains(m.GetMessage(), want) {
			t.Errorf("convert to mode %d: refusal %q does not say %q", int32(mode), m.GetMessage(), want)
		}
	}
	// The stream goes on.
	r.granted(r.lock("modes/after", dlmpb.Mode_MODE_EX))
}

// TestAttackInvalidUTF8Name: a resource name that is not UTF-8 got gRPC
// Internal and ended the whole session stream; now that request alone is
// refused (REASON_INVALID, naming the field) and the next one is granted.
func TestAttackInvalidUTF8Name(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r := newRawStream(t, s, encode(t, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: t.Name()}}}))
	for _, want := range []string{"opened", "sync"} {
		if m, err := r.recv(); err != nil || (m.GetOpened() == nil && m.GetSync() == nil) {
			t.Fatalf("want %s, got %v %v", want, m, err)
		}
	}
	r.send(withRaw(t, lockMsg(1, "utf8/@@@", dlmpb.Mode_MODE_EX), "@@@", "\xff\xfeA"))
	m, err := r.recv()
	if err != nil {
		t.Fatalf("invalid UTF-8 resource ended the stream: %v", err)
	}
	wantRefusal(t, m, 1, dlmpb.Reason_REASON_INVALID, "resource", "UTF-8", "byte 5")
	r.send(encode(t, lockMsg(2, "utf8/ok", dlmpb.Mode_MODE_EX)))
	if m, err := r.recv(); err != nil || m.GetGranted().GetId().GetSeq() != 2 {
		t.Fatalf("the next request on the stream: %v %v, want Granted", m, err)
	}
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 1 {
		t.Fatalf("%d resources, want only utf8/ok", st.GetResources())
	}

	// A label that is not UTF-8 refuses the open (the stream's only
	// request) with InvalidArgument, not Internal.
	bad := newRawStream(t, s, withRaw(t, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: "label-@@"}}}, "@@", "\xc3("))
	_, err = bad.recv()
	wantCode(t, err, codes.InvalidArgument, "open with a label that is not UTF-8")
	if !strings.Contains(err.Error(), "label") {
		t.Fatalf("open with a label that is not UTF-8: %v does not name the label", err)
	}
}

// TestAttackControlCharactersInNames: NUL, other control characters and
// bidirectional formatting characters were accepted in names and shown in
// listings; resource names and session labels with them are now refused,
// naming the position and the code point.
func TestAttackControlCharactersInNames(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r, _ := open(t, s, 0, 10*time.Second)
	cases := []struct{ name, want string }{
		{"a\x00b", "U+0000 at byte 1"},
		{"ansi\x1b[31m", "U+001B at byte 4"},
		{"del\x7f", "U+007F at byte 3"},
		{"c1\u0085", "U+0085 at byte 2"},
		{"\u202Egnp.exe", "U+202E at byte 0"},
		{"lrm\u200E", "U+200E at byte 3"},
		{"isolate\u2066x\u2069", "U+2066 at byte 7"},
		{"alm\u061C", "U+061C at byte 3"},
	}
	for _, c := range cases {
		m := r.refusal(r.lock(c.name, dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%q: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	// Other Unicode is fine.
	r.granted(r.lock("ресурс/ü/世界/🔒 tab-free", dlmpb.Mode_MODE_EX))
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 1 {
		t.Fatalf("%d resources, want 1", st.GetResources())
	}

	for _, label := range []string{"nul\x00", "esc\x1b]0;title\x07", "rlo\u202E"} {
		_, err := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: label}}}).stream.Recv()
		wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("open with label %q", label))
		if !strings.Contains(err.Error(), "label") || !strings.Contains(err.Error(), "U+") {
			t.Fatalf("open with label %q: %v names neither the label nor the code point", label, err)
		}
	}
}

// TestAttackListArguments: List with a prefix (or after) that is not UTF-8
// got Internal; it is now InvalidArgument, and so are control characters in
// a prefix and a negative limit (which the Go client refuses). The HTTP
// listings answer 400 to the same.
func TestAttackListArguments(t *testing.T) {
	s := startServer(t, ServerConfig{})
	conn := dialRaw(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list := func(req rawBytes) error {
		return conn.Invoke(ctx, dlmpb.DLM_List_FullMethodName, req, &dlmpb.ListResponse{})
	}
	for field, req := range map[string]rawBytes{
		"prefix": withRaw(t, &dlmpb.ListRequest{Prefix: "p@"}, "@", "\xff"),
		"after":  withRaw(t, &dlmpb.ListRequest{After: "a@"}, "@", "\x80"),
	} {
		err := list(req)
		wantCode(t, err, codes.InvalidArgument, "List with an "+field+" that is not UTF-8")
		if !strings.Contains(err.Error(), field) {
			t.Fatalf("List with an %s that is not UTF-8: %v does not name it", field, err)
		}
	}
	err := list(encode(t, &dlmpb.ListRequest{Prefix: "x\x00"}))
	wantCode(t, err, codes.InvalidArgument, "List with NUL in the prefix")
	err = list(encode(t, &dlmpb.ListRequest{Limit: -5}))
	wantCode(t, err, codes.InvalidArgument, "List with a negative limit")
	if !strings.Contains(err.Error(), "limit -5") {
		t.Fatalf("List with a negative limit: %v does not name it", err)
	}
	if err := list(encode(t, &dlmpb.ListRequest{Prefix: "ok/"})); err != nil {
		t.Fatalf("List with a good prefix: %v", err)
	}

	for _, path := range []string{
		"/v1/resources?prefix=%ff", "/v1/resources?prefix=a%00", "/v1/resources?after=%c3%28",
		"/v1/resources?prefix=%e2%80%ae", "/v1/events?prefix=%ff", "/v1/events?prefix=%1b",
	} {
		code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+path, "")
		if code != http.StatusBadRequest || !strings.Contains(body, "prefix") && !strings.Contains(body, "after") {
			t.Errorf("GET %s: %d %q, want 400 naming the parameter", path, code, body)
		}
	}
	if code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/v1/resources?prefix=%d1%80", ""); code != http.StatusOK {
		t.Fatalf("GET /v1/resources with a UTF-8 prefix: %d %s", code, body)
	}
}

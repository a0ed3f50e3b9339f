package server

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/server/raftnode"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
)

// startServer starts an in-memory server with HTTP, ready, closed at the end.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	cfg.Node.InMemory = cfg.Node.Dir == ""
	if cfg.Node.Raft == nil {
		cfg.Node.Raft = servertest.FastRaft
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	if cfg.SessionMargin == 0 {
		cfg.SessionMargin = 10 * time.Millisecond
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// rawSession is a session stream driven by hand.
type rawSession struct {
	t      *testing.T
	stream dlmpb.DLM_SessionClient
	cancel context.CancelFunc
	sid    uint64
	seq    uint64
	token  []byte // the session's resume token, from its SessionOpened
}

func dialPB(t *testing.T, addr string) dlmpb.DLMClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dlmpb.NewDLMClient(conn)
}

// stream opens a stream and sends first (no open if nil).
func stream(t *testing.T, s *Server, first *dlmpb.SessionRequest) *rawSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := dialPB(t, s.Addr()).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawSession{t: t, stream: st, cancel: cancel}
	if first != nil {
		r.send(first)
	}
	return r
}

// open opens a session with ttl and reads SessionOpened and SessionSync.
func open(t *testing.T, s *Server, sid uint64, ttl time.Duration) (*rawSession, *dlmpb.SessionSync) {
	t.Helper()
	r := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{
		Session: sid, Ttl: durationpb.New(ttl), Label: t.Name()}}})
	o := r.recv().GetOpened()
	if o == nil {
		t.Fatal("no SessionOpened")
	}
	r.sid, r.token = o.GetSession(), o.GetResumeToken()
	sync := r.recv().GetSync()
	if sync == nil || sync.GetSession() != r.sid {
		t.Fatalf("no SessionSync after SessionOpened: %v", sync)
	}
	return r, sync
}

// resume resumes prev's session on a new stream with its resume token and
// reads SessionOpened and SessionSync.
func resume(t *testing.T, s *Server, prev *rawSession, ttl time.Duration) (*rawSession, *dlmpb.SessionSync) {
	t.Helper()
	r := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{
		Session: prev.sid, Ttl: durationpb.New(ttl), Label: t.Name(), ResumeToken: prev.token}}})
	m := r.recv()
	o := m.GetOpened()
	if o == nil || o.GetSession() != prev.sid || !o.GetResumed() {
		t.Fatalf("resume of session %d: %v, want SessionOpened resumed", prev.sid, m)
	}
	if len(o.GetResumeToken()) != 0 {
		t.Fatal("a resume sent the resume token again")
	}
	r.sid, r.token, r.seq = prev.sid, prev.token, prev.seq
	sync := r.recv().GetSync()
	if sync == nil || sync.GetSession() != r.sid {
		t.Fatalf("no SessionSync after SessionOpened: %v", sync)
	}
	return r, sync
}

func (r *rawSession) send(m *dlmpb.SessionRequest) {
	r.t.Helper()
	if err := r.stream.Send(m); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawSession) recv() *dlmpb.SessionResponse {
	r.t.Helper()
	m, err := r.stream.Recv()
	if err != nil {
		r.t.Fatalf("recv: %v", err)
	}
	return m
}

// recvSkipAcks returns the next message that is not a keepalive ack or a
// blocking notice.
func (r *rawSession) recvSkipAcks() *dlmpb.SessionResponse {
	r.t.Helper()
	for {
		if m := r.recv(); m.GetKeepAliveAck() == nil && m.GetBlocking() == nil {
			return m
		}
	}
}

func (r *rawSession) lock(res string, mode dlmpb.Mode, mut ...func(*dlmpb.LockRequest)) uint64 {
	r.seq++
	lr := &dlmpb.LockRequest{Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, Resource: res, Mode: mode, Owner: r.seq}
	for _, f := range mut {
		f(lr)
	}
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: lr}})
	return r.seq
}

func (r *rawSession) release(lock uint64) {
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: lock}}})
}

// refusal expects a Refused for request seq with reason.
func (r *rawSession) refusal(seq uint64, want dlmpb.Reason) *dlmpb.Refused {
	r.t.Helper()
	m := r.recvSkipAcks().GetRefused()
	if m == nil || m.GetId().GetSeq() != seq || m.GetReason() != want {
		r.t.Fatalf("want Refused %v for request %d, got %v", want, seq, m)
	}
	if m.GetMessage() == "" {
		r.t.Fatalf("refusal %v without a message", want)
	}
	return m
}

func (r *rawSession) granted(seq uint64) *dlmpb.Granted {
	r.t.Helper()
	m := r.recvSkipAcks()
	g := m.GetGranted()
	if g == nil || (seq != 0 && g.GetId().GetSeq() != seq) {
		r.t.Fatalf("want Granted for request %d, got %v", seq, m)
	}
	return g
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	if s, _ := status.FromError(err); s.Message() == "" {
		t.Fatalf("%s: no message", what)
	}
}

func TestStreamRejectsBadOpen(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxSessions: 2}}})
	cases := map[string]*dlmpb.SessionRequest{
		"lock before open": {Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{Resource: "r"}}},
		"empty message":    {},
		"ttl too short":    {Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Millisecond)}}},
		"ttl too long":     {Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(2 * time.Hour)}}},
		"invalid ttl":      {Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: &durationpb.Duration{Seconds: 1, Nanos: -5}}}},
		"label too long":   {Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: strings.Repeat("l", raftnode.DefaultMaxNameLen+1)}}},
	}
	for name, first := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := stream(t, s, first).stream.Recv()
			wantCode(t, err, codes.InvalidArgument, name)
		})
	}
	// Resuming a session that does not exist ends with SessionExpired.
	r := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Session: 999}}})
	if r.recv().GetExpired().GetSession() != 999 {
		t.Fatal("resume of an unknown session: want SessionExpired")
	}
	// The session limit: ResourceExhausted. (Sessions that outlive the
	// test: without keepalives, a short TTL could free a place first.)
	open(t, s, 0, time.Minute)
	open(t, s, 0, time.Minute)
	_, err := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{}}}).stream.Recv()
	wantCode(t, err, codes.ResourceExhausted, "third session of two")
}

func TestStreamRefusesBadRequests(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxLocksPerSession: 3}}})
	r, _ := open(t, s, 0, 5*time.Second)
	other, _ := open(t, s, 0, 5*time.Second)

	r.refusal(r.lock("", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_INVALID)
	r.refusal(r.lock(strings.Repeat("n", raftnode.DefaultMaxNameLen+1), dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_NAME_TOO_LONG)
	r.refusal(r.lock("r", dlmpb.Mode(42)), dlmpb.Reason_REASON_INVALID_MODE)
	r.refusal(r.lock("r", dlmpb.Mode_MODE_UNSPECIFIED), dlmpb.Reason_REASON_INVALID)
	r.refusal(r.lock("r", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = 2, 1 }), dlmpb.Reason_REASON_INVALID)
	r.refusal(r.lock("r", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(-time.Second) }), dlmpb.Reason_REASON_INVALID)
	r.refusal(r.lock("sem", 0, func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = 2, 3 }), dlmpb.Reason_REASON_INVALID)

	r.refusal(r.lock("r", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = make([]byte, protocol.MaxMetadataBytes+1) }), dlmpb.Reason_REASON_INVALID)

	// A granted lock; then requests about it from the wrong session.
	g := r.granted(r.lock("r", dlmpb.Mode_MODE_EX))
	other.release(g.GetLockId())
	other.refusal(other.seq, dlmpb.Reason_REASON_NOT_OWNER)
	r.release(12345)
	r.refusal(r.seq, dlmpb.Reason_REASON_UNKNOWN_LOCK)
	r.refusal(r.lock("r", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.NoQueue = true }), dlmpb.Reason_REASON_WOULD_BLOCK)

	// Semaphore capacity and kind mismatches.
	r.granted(r.lock("sem", 0, func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = 2, 1 }))
	r.refusal(r.lock("sem", 0, func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = 3, 1 }), dlmpb.Reason_REASON_CAPACITY_MISMATCH)
	r.refusal(r.lock("sem", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_KIND_MISMATCH)

	// The per-session lock limit.
	r.granted(r.lock("third", dlmpb.Mode_MODE_EX))
	r.refusal(r.lock("fourth", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_TOO_MANY_LOCKS)

	// A message over MaxMessageBytes ends the stream with ResourceExhausted.
	big, _ := open(t, s, 0, 5*time.Second)
	big.lock(strings.Repeat("x", MaxMessageBytes+1), dlmpb.Mode_MODE_EX)
	for {
		if _, err := big.stream.Recv(); err != nil {
			wantCode(t, err, codes.ResourceExhausted, "oversized message")
			break
		}
	}

	// An empty request keeps the stream open.
	r.send(&dlmpb.SessionRequest{})
	r.refusal(0, dlmpb.Reason_REASON_INVALID)
	// A second open ends the stream.
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{}}})
	if _, err := r.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("open on an open stream: %v, want InvalidArgument", err)
	}
}

func TestStreamPushesGrantsInOrderAndDeduplicates(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, 5*time.Second)
	b, _ := open(t, s, 0, 5*time.Second)
	ga := a.granted(a.lock("r", dlmpb.Mode_MODE_EX))

	seq := b.lock("r", dlmpb.Mode_MODE_EX)
	q := b.recvSkipAcks().GetQueued()
	if q == nil || q.GetId().GetSeq() != seq {
		t.Fatalf("want Queued for %d", seq)
	}
	// The same request again (a retry): the same answer, no second lock.
	b.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Session: b.sid, Seq: seq}, Resource: "r", Mode: dlmpb.Mode_MODE_EX, Owner: seq}}})
	if q2 := b.recvSkipAcks().GetQueued(); q2.GetLockId() != q.GetLockId() {
		t.Fatalf("retry answered %v, want the first answer %v", q2, q)
	}
	if n := len(s.mustList(t, "r").GetWaiting()); n != 1 {
		t.Fatalf("%d waiters after a retried request, want 1", n)
	}

	a.release(ga.GetLockId())
	if rel := a.recvSkipAcks().GetReleased(); rel.GetLockId() != ga.GetLockId() {
		t.Fatalf("release answer %v", rel)
	}
	g := b.granted(0) // pushed, without a request id
	if g.GetLockId() != q.GetLockId() || g.GetToken() <= ga.GetToken() {
		t.Fatalf("pushed grant %v after %v: wrong lock or token not increasing", g, ga)
	}
	// The token is the last one issued (nothing was granted since), and at
	// least the Raft index of the entry that granted it (the release's).
	var last uint64
	s.Node().FSM().Read(func(v fsm.View) { last = v.Table().LastToken() })
	if g.GetToken() != last {
		t.Fatalf("token %d, the last token issued is %d", g.GetToken(), last)
	}
}

func (s *Server) mustList(t *testing.T, name string) *dlmpb.ResourceInfo {
	t.Helper()
	resp, err := s.List(context.Background(), &dlmpb.ListRequest{Prefix: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

func TestStreamKeepAliveExpiryAndWaitTimeout(t *testing.T) {
	s := startServer(t, Config{})
	// a must hold until b's short wait has timed out: a TTL that the steps
	// up to then fit in however loaded the machine.
	const ttl = 2 * time.Second
	a, _ := open(t, s, 0, ttl)
	b, _ := open(t, s, 0, time.Minute)

	// Keepalives are acknowledged with their seq.
	a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: 7, SentUnixNano: 42}}})
	if ack := a.recv().GetKeepAliveAck(); ack.GetSeq() != 7 || ack.GetSentUnixNano() != 42 || ack.GetTtl().AsDuration() != ttl {
		t.Fatalf("ack = %v", ack)
	}
	ga := a.granted(a.lock("r", dlmpb.Mode_MODE_EX))

	// A wait with a deadline times out (the leader advances the clock).
	seq := b.lock("r", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(30 * time.Millisecond) })
	q := b.recvSkipAcks().GetQueued()
	if q.GetId().GetSeq() != seq {
		t.Fatalf("want Queued, got %v", q)
	}
	if to := b.recvSkipAcks().GetTimedOut(); to.GetLockId() != q.GetLockId() {
		t.Fatalf("want TimedOut for lock %d, got %v", q.GetLockId(), to)
	}

	// b waits with no deadline; a stops its keepalives and expires.
	b.lock("r", dlmpb.Mode_MODE_EX)
	b.recvSkipAcks().GetQueued()
	start := time.Now()
	g := b.granted(0)
	// The stream's own context (20s) bounds the wait for a session that
	// never expires.
	t.Logf("granted %s after the holder went silent, TTL %s", time.Since(start), ttl)
	if g.GetToken() <= ga.GetToken() {
		t.Fatalf("token %d after expiry not above %d", g.GetToken(), ga.GetToken())
	}
	// a's stream is told, then ended.
	for {
		m, err := a.stream.Recv()
		if err != nil {
			t.Fatalf("a's stream ended without SessionExpired: %v", err)
		}
		if m.GetExpired() != nil {
			break
		}
	}
	if _, err := a.stream.Recv(); err != io.EOF {
		t.Fatalf("after SessionExpired: %v, want the stream's end", err)
	}
}

func TestStreamResumeSendsSessionState(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, 5*time.Second)
	g := a.granted(a.lock("held", dlmpb.Mode_MODE_PR))
	b, _ := open(t, s, 0, 5*time.Second)
	gb := b.granted(b.lock("busy", dlmpb.Mode_MODE_EX))
	a.lock("busy", dlmpb.Mode_MODE_EX)
	a.recvSkipAcks().GetQueued()
	a.cancel() // the connection drops

	r, sync := resume(t, s, a, 5*time.Second)
	if r.sid != a.sid {
		t.Fatalf("resumed session %d, want %d", r.sid, a.sid)
	}
	states := map[string]dlmpb.LockInfo_State{}
	for _, l := range sync.GetLocks() {
		states[l.GetResource()] = l.GetState()
		if l.GetResource() == "held" && l.GetToken() != g.GetToken() {
			t.Fatalf("token %d in the sync, granted %d", l.GetToken(), g.GetToken())
		}
	}
	if states["held"] != dlmpb.LockInfo_STATE_GRANTED || states["busy"] != dlmpb.LockInfo_STATE_WAITING {
		t.Fatalf("sync = %v", states)
	}
	// Events after the sync reach the new stream.
	b.release(gb.GetLockId())
	if rel := b.recvSkipAcks().GetReleased(); rel.GetLockId() != gb.GetLockId() {
		t.Fatalf("release answer %v", rel)
	}
	if g := r.granted(0); g.GetLockId() == 0 {
		t.Fatal("no pushed grant on the resumed stream")
	}
	// Close ends the session and its locks.
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
	for {
		m := r.recv()
		if m.GetClosed() != nil {
			break
		}
	}
	if s.mustList(t, "held") != nil {
		t.Fatal("lock left after the session closed")
	}
}

func TestStreamSurvivesRandomInput(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 5*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	sent := 0
	for range 5000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		var m dlmpb.SessionRequest
		if proto.Unmarshal(b, &m) != nil || m.GetOpen() != nil {
			continue
		}
		if err := r.stream.Send(&m); err != nil {
			break
		}
		sent++
	}
	if sent < 100 {
		t.Fatalf("only %d random messages decoded", sent)
	}
	// The server still serves.
	c, _ := open(t, s, 0, 5*time.Second)
	c.granted(c.lock("after-fuzz", dlmpb.Mode_MODE_EX))
}

func TestHTTPEndpoints(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, 5*time.Second)
	a.granted(a.lock("orders/42", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte("worker 3") }))
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "dlm_server_sessions 1") || !strings.Contains(body, `dlm_server_lock_events_total{kind="Granted"}`) {
		t.Fatalf("/metrics %d:\n%s", code, body)
	}
	code, body := get("/v1/resources?prefix=orders/")
	var list dlmpb.ListResponse
	if err := protojson.Unmarshal([]byte(body), &list); err != nil || code != 200 {
		t.Fatalf("/v1/resources %d %v:\n%s", code, err, body)
	}
	if len(list.Resources) != 1 || list.Resources[0].GetName() != "orders/42" || len(list.Resources[0].GetHolders()) != 1 || list.Resources[0].GetHolders()[0].GetMode() != dlmpb.Mode_MODE_EX {
		t.Fatalf("/v1/resources:\n%s", body)
	}
	if m := list.Resources[0].GetHolders()[0].GetMetadata(); m != "worker 3" {
		t.Fatalf("/v1/resources: holder metadata %q, want worker 3", m)
	}
	code, body = get("/v1/sessions")
	var page dlmpb.SessionPage
	if err := protojson.Unmarshal([]byte(body), &page); err != nil || code != 200 || len(page.Sessions) != 1 {
		t.Fatalf("/v1/sessions %d %v:\n%s", code, err, body)
	}
	if ps := page.Sessions[0]; ps.GetLabel() != t.Name() || ps.GetExpiresIn() == nil || len(ps.GetLocks()) != 1 || ps.GetLocks()[0].GetMetadata() != "worker 3" {
		t.Fatalf("/v1/sessions:\n%s", body)
	}
	if code, _ := get("/v1/resources?limit=x"); code != 400 {
		t.Fatalf("bad limit: %d, want 400", code)
	}
}

// Close stops every goroutine of the server, with streams open and requests
// queued.
func TestServerCloseLeavesNoGoroutines(t *testing.T) {
	s, err := Start(Config{Node: raftnode.Config{InMemory: true, Raft: servertest.FastRaft}, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := open(t, s, 0, 5*time.Second)
	b, _ := open(t, s, 0, 5*time.Second)
	a.granted(a.lock("r", dlmpb.Mode_MODE_EX))
	b.lock("r", dlmpb.Mode_MODE_EX)
	b.recvSkipAcks()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err = nil
	for err == nil { // queued notices (Blocking) may come first
		_, err = a.stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after Close: %v, want Unavailable", err)
	}
	servertest.CheckNoLeaks(t)
}

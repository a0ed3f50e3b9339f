package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// The attacks of issue 17, each driven as the attacker drove it: raw
// gRPC messages through api/dlmpb against an in-process server.

// --- Issue 17, items 4, 6 and 10: per-stream memory, slow readers, stream plumbing ---

// openUnread opens a session on a connection whose flow-control windows
// are static (64 KiB, no BDP growth), so that what the transport absorbs
// of a stream the client never reads is known.
func openUnread(t *testing.T, s *Server) *rawSession {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := dlmpb.NewDLMClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawSession{t: t, stream: st, cancel: cancel}
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Minute)}}})
	r.sid = r.recv().GetOpened().GetSession()
	if r.sid == 0 || r.recv().GetSync() == nil {
		t.Fatal("no SessionOpened and SessionSync")
	}
	return r
}

// floodReleases sends n releases of locks that do not exist, without
// reading a single answer: each is answered (Refused, UNKNOWN_LOCK) into
// the stream's queue.
func floodReleases(r *rawSession, n int) {
	r.t.Helper()
	for range n {
		r.seq++
		err := r.stream.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
			Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: 1_000_000 + r.seq}}})
		if err != nil {
			return // the server ended the stream: Recv tells why
		}
	}
}

// outboxOf returns the queue of session sid's stream.
func outboxOf(t *testing.T, s *Server, sid uint64) *outbox {
	t.Helper()
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	ob := s.hub.boxes[locktable.SessionID(sid)]
	if ob == nil {
		t.Fatalf("session %d has no stream", sid)
	}
	return ob
}

// waitEnded waits until the server has ended ob (up to 20 s: "never"
// rather than "late"), before the client reads: a client that reads while
// the answers are still coming may keep up.
func waitEnded(t *testing.T, ob *outbox) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ob.isEnded() {
		if time.Now().After(deadline) {
			t.Fatalf("session %d: the stream of a client that does not read was not ended", ob.sid)
		}
		time.Sleep(time.Millisecond)
	}
}

// drainToEnd reads a stream to its end and returns how many messages came
// and the stream's final error.
func drainToEnd(r *rawSession) (int, error) {
	n := 0
	for {
		if _, err := r.stream.Recv(); err != nil {
			return n, err
		}
		n++
	}
}

// A client that sends requests and never reads the answers (8 such streams
// x 70,000 requests added 190 MB) has its stream ended once its queue
// passes MaxStreamQueueBytes, with ResourceExhausted saying that the
// session survives; the server-wide queued bytes never pass the stream's
// bound (plus the one message that found it full) and go back to zero.
func TestAttackUnreadRequestFloodEndsStream(t *testing.T) {
	const limit = 16 << 10
	s := startServer(t, ServerConfig{MaxStreamQueueBytes: limit})
	r := openUnread(t, s)
	ob := outboxOf(t, s, r.sid)
	floodReleases(r, 10_000) // about 600 KB of answers: far past the 64 KiB window and the queue
	waitEnded(t, ob)
	n, err := drainToEnd(r)
	wantCode(t, err, codes.ResourceExhausted, "flooded stream")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "session survives") || !strings.Contains(msg, "16384 bytes") {
		t.Fatalf("status message %q: want the limit and that the session survives", msg)
	}
	t.Logf("%d answers reached the client before the end", n)
	if peak := s.queue.peak(); peak > limit+StreamMessageOverhead+256 {
		t.Fatalf("queued bytes peaked at %d, the stream's bound is %d", peak, limit)
	}
	waitQueuedBytes(t, s, 0)
	// The session survives: it is resumed on a new stream.
	c, _ := open(t, s, r.sid, time.Minute)
	c.seq = r.seq
	seq := c.lock("after-flood", dlmpb.Mode_MODE_EX)
	for { // answers to the flood's last requests may come first
		m := c.recvSkipAcks()
		if f := m.GetRefused(); f != nil && f.GetId().GetSeq() < seq {
			continue
		}
		if m.GetGranted().GetId().GetSeq() != seq {
			t.Fatalf("want Granted for request %d, got %v", seq, m)
		}
		break
	}
}

// waitQueuedBytes waits (up to 10 s: "never" rather than "late") until the
// server's queued bytes are want.
func waitQueuedBytes(t *testing.T, s *Server, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.queue.used() != want {
		if time.Now().After(deadline) {
			t.Fatalf("queued bytes %d, want %d", s.queue.used(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Several flooding streams together cannot queue more than MaxQueuedBytes:
// the one whose message would pass it is ended with ResourceExhausted.
func TestAttackFloodsPassingTheServerWideBoundEndStreams(t *testing.T) {
	const limit = 48 << 10
	s := startServer(t, ServerConfig{MaxQueuedBytes: limit})
	var (
		rs  []*rawSession
		obs []*outbox
	)
	for range 4 {
		r := openUnread(t, s)
		rs, obs = append(rs, r), append(obs, outboxOf(t, s, r.sid))
	}
	for _, r := range rs {
		floodReleases(r, 5_000) // each alone is far past the windows and the bound
	}
	for _, ob := range obs {
		waitEnded(t, ob)
	}
	for i, r := range rs {
		_, err := drainToEnd(r)
		wantCode(t, err, codes.ResourceExhausted, "flooded stream")
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "all streams") || !strings.Contains(msg, "session survives") {
			t.Fatalf("stream %d: status message %q: want the server-wide bound and that the session survives", i, msg)
		}
	}
	if peak := s.queue.peak(); peak > limit {
		t.Fatalf("queued bytes peaked at %d, the server-wide bound is %d", peak, limit)
	}
	waitQueuedBytes(t, s, 0)
}

// scriptedStream is a session stream whose client sends msgs, then nothing
// until its context ends.
type scriptedStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs chan *dlmpb.SessionRequest
}

func (f *scriptedStream) Context() context.Context { return f.ctx }
func (f *scriptedStream) Send(*dlmpb.SessionResponse) error {
	panic("read never sends")
}

func (f *scriptedStream) Recv() (*dlmpb.SessionRequest, error) {
	select {
	case m := <-f.msgs:
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

// When the node refuses a request at Submit, the refusal is sent and the
// stream then ends: before, the reader stopped while the stream stayed
// open, taking no more requests (issue 17, item 10).
func TestAttackSubmitFailureEndsStream(t *testing.T) {
	s := startServer(t, ServerConfig{})
	r, _ := open(t, s, 0, time.Minute)
	sid := locktable.SessionID(r.sid)
	ob := newOutbox(sid, 100, 1<<20, s.queue)
	streamCtx, endStream := context.WithTimeout(context.Background(), 20*time.Second)
	defer endStream()
	st := &scriptedStream{ctx: streamCtx, msgs: make(chan *dlmpb.SessionRequest, 1)}
	st.msgs <- &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Seq: 1}, Resource: "r", Mode: dlmpb.Mode_MODE_EX}}}
	submitCtx, cancel := context.WithCancel(context.Background())
	cancel() // Submit fails at once
	s.wg.Add(1)
	go s.read(submitCtx, st, sid, ob, principal{open: true}, "")

	select {
	case <-ob.wake:
	case <-streamCtx.Done():
		t.Fatal("nothing queued")
	}
	var got []*dlmpb.SessionResponse
	for {
		msgs, ended, err := ob.take(nil)
		got = append(got, msgs...)
		if ended {
			if err == nil || status.Code(endStatus(err)) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want Unavailable", err)
			}
			break
		}
		select {
		case <-ob.wake:
		case <-streamCtx.Done():
			t.Fatalf("the stream was not ended after the refusal (%d messages queued)", len(got))
		}
	}
	if len(got) != 1 || got[0].GetRefused().GetReason() != dlmpb.Reason_REASON_NOT_LEADER || got[0].GetRefused().GetId().GetSeq() != 1 {
		t.Fatalf("queued %v, want the refusal of request 1 before the end", got)
	}
}

// A stream whose keepalives cannot be acknowledged (its client never
// reads, or acknowledgements stall: here the test holds its queue) does
// not stop other streams' readers: before, every reader handed its
// keepalives to one shared channel of 4,096, and once it was full every
// reader blocked.
func TestAttackStalledKeepalivesDoNotBlockOtherStreams(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	s.hub.mu.Lock()
	aq := s.hub.boxes[locktable.SessionID(a.sid)]
	s.hub.mu.Unlock()
	aq.mu.Lock() // a's acknowledgements stall
	held := true
	defer func() {
		if held {
			aq.mu.Unlock()
		}
	}()
	for i := range uint64(20_000) {
		a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: i + 1}}})
	}
	b.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: 1}}})
	seq := b.lock("r", dlmpb.Mode_MODE_EX)
	acked := false
	for { // b's reader goes on: its request is answered
		m := b.recv()
		if ack := m.GetKeepAliveAck(); ack != nil {
			acked = ack.GetSeq() == 1
			continue
		}
		if g := m.GetGranted(); g != nil && g.GetId().GetSeq() == seq {
			break
		}
		t.Fatalf("want Granted for request %d, got %v", seq, m)
	}
	aq.mu.Unlock()
	held = false
	for !acked { // and its keepalive acknowledged once acks flow again
		ack := b.recv().GetKeepAliveAck()
		if ack == nil || ack.GetSeq() != 1 {
			t.Fatalf("got %v, want the ack of keepalive 1", ack)
		}
		acked = true
	}
}

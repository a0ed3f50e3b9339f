package dlmserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// connectOnce opens a stream and opens or resumes the session on it,
// trying the store's servers in turn, once: the current one first, then
// the leader a follower names, or the next address. On return the stream
// is installed, the session's state reconciled with the server's, and
// unanswered requests sent again. On failure, leaderless reports that a
// dlm node answered but none was a leader ready to serve (an election, or
// a leader still starting): worth trying again soon.
func (s *Store) connectOnce(ctx context.Context) (conn *streamConn, leaderless bool, err error) {
	srv := s.srv.current()
	var errs []error
	for range s.srv.size() + 1 { // every address, and a leader named on the way
		// A server that does not answer within a keepalive interval (a
		// stopped process, a partition) is passed over for the next.
		sctx, scancel := context.WithTimeout(ctx, max(s.opt.interval, 100*time.Millisecond))
		conn, trailer, err := s.connectTo(sctx, srv)
		scancel()
		if err == nil {
			return conn, false, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || s.ctx.Err() != nil || errors.Is(err, errSessionEnded) ||
			errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrPermissionDenied) {
			break // every server of a cluster has the same configuration
		}
		if _, notLeader := leaderHint(err, trailer); notLeader {
			leaderless = true
		}
		srv = s.srv.failed(srv, err, trailer)
	}
	return nil, leaderless, errors.Join(errs...)
}

// resumeRefused reports whether err is the server's refusal of a resume for
// its resume token (PermissionDenied naming the token).
func resumeRefused(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.PermissionDenied && strings.Contains(st.Message(), "resume token")
}

// errSessionEnded is a reconnection that found the session given up or
// the store closed meanwhile.
var errSessionEnded = errors.New("the session ended while reconnecting")

// connectTo is connect on one server. On failure it also returns the
// stream's trailer, which may name the leader. Over TransportTCP, an
// address where something answers but not the session transport (a proxy
// that carries only gRPC) is tried again over gRPC, and kept on gRPC if
// that works.
func (s *Store) connectTo(ctx context.Context, srv *server) (*streamConn, metadata.MD, error) {
	conn, trailer, err := s.connectVia(ctx, srv, srv.grpcOnly.Load())
	var ns *notServedError
	if err == nil || !errors.As(err, &ns) || ctx.Err() != nil {
		return conn, trailer, err
	}
	conn, trailer, gerr := s.connectVia(ctx, srv, true)
	if gerr != nil {
		return nil, trailer, errors.Join(err, gerr)
	}
	srv.grpcOnly.Store(true)
	s.log.Info("dlm remote: the session transport is not served at this address (a proxy that carries only gRPC?): the session goes over gRPC", "server", srv.addr, "err", err)
	return conn, nil, nil
}

// connectVia is connectTo over gRPC or over the session transport.
func (s *Store) connectVia(ctx context.Context, srv *server, useGRPC bool) (*streamConn, metadata.MD, error) {
	s.mu.Lock()
	sid, resume := s.st.sid, s.st.resume
	s.mu.Unlock()

	sctx, cancel := context.WithCancel(s.ctx)
	stopHandshake := context.AfterFunc(ctx, cancel)
	var trailer metadata.MD
	fail := func(err error) (*streamConn, metadata.MD, error) {
		cancel()
		if aerr := authError(err); aerr != nil {
			return nil, trailer, fmt.Errorf("dlm server %s: %w", srv.addr, aerr)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, ctx.Err())
		}
		if r := trailer.Get(reasonHeader); len(r) > 0 && r[0] == dlmpb.Reason_REASON_STORAGE.String() {
			return nil, trailer, fmt.Errorf("%w: dlm server %s: %w", ErrStorage, srv.addr, err)
		}
		return nil, trailer, fmt.Errorf("%w: dlm server %s: %w", driver.ErrUnavailable, srv.addr, err)
	}
	stream, err := s.openStream(sctx, srv, useGRPC)
	if err != nil {
		return fail(err)
	}
	sent := time.Now()
	err = stream.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{
		Session: sid, Ttl: durationpb.New(s.opt.ttl), Label: s.opt.label, ResumeToken: resume,
	}}})
	if err == nil {
		err = stream.Flush()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		// io.EOF: the server ended the stream (refused credentials, say);
		// Recv below returns its status.
		return fail(err)
	}
	m, err := stream.Recv()
	if err != nil {
		trailer = stream.Trailer()
		if sid != 0 && resumeRefused(err) {
			// The session can never be resumed (opened by an older
			// server, which kept no token): give it up, open another.
			cancel()
			s.mu.Lock()
			if s.st.sid == sid {
				s.loseSessionLocked(fmt.Errorf("the server refused to resume it: %s", status.Convert(err).Message()))
			}
			s.mu.Unlock()
			return s.connectVia(ctx, srv, useGRPC)
		}
		return fail(err)
	}
	if m.GetExpired() != nil {
		cancel()
		s.mu.Lock()
		if s.st.sid == sid {
			s.loseSessionLocked(errors.New("the server expired the session while the client was disconnected"))
		}
		s.mu.Unlock()
		return s.connectVia(ctx, srv, useGRPC) // opens a new session
	}
	opened := m.GetOpened()
	if opened == nil {
		return fail(fmt.Errorf("unexpected first message %T", m.GetMsg()))
	}
	m, err = stream.Recv()
	if err != nil {
		return fail(err)
	}
	sync := m.GetSync()
	if sync == nil {
		return fail(fmt.Errorf("unexpected message %T instead of the session state", m.GetMsg()))
	}
	if !stopHandshake() {
		return fail(errors.New("handshake cut short"))
	}

	conn := newStreamConn(sctx, cancel, stream)
	s.mu.Lock()
	if s.st.closing || (sid != 0 && s.st.sid != sid) {
		// Closed, or the session was given up meanwhile: do not revive it.
		s.mu.Unlock()
		if stream.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}}) == nil {
			_ = stream.Flush()
		}
		return fail(errSessionEnded)
	}
	if sid == 0 {
		s.st.sid, s.st.resume = opened.GetSession(), opened.GetResumeToken()
		s.st.ttl = opened.GetTtl().AsDuration()
		s.st.validUntil = sent.Add(s.st.ttl - s.Drift(s.st.ttl))
		s.armLossLocked()
	}
	s.reconcileLocked(sync)
	s.st.conn = conn
	s.st.lastAck = time.Now()
	// What the session state did not settle is sent again, in order and
	// ahead of any new request, with its sequence number: if it was still
	// on its way through the server when the state was taken, the server
	// answers it from its reply cache instead of applying it twice.
	pending := make([]*call, 0, len(s.st.calls))
	for _, c := range s.st.calls {
		pending = append(pending, c)
	}
	slices.SortFunc(pending, func(a, b *call) int { return cmp.Compare(a.seq, b.seq) })
	for _, c := range pending {
		conn.send(c.msg)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		conn.write()
	}()
	s.mu.Unlock()
	s.sendKeepAlive(conn)
	s.log.Debug("dlm remote: session stream open", "server", srv.addr, "session", opened.GetSession(), "resumed", opened.GetResumed(), "locks", len(sync.GetLocks()))
	return conn, nil, nil
}

// run receives on the current stream and reconnects when it breaks, until
// the store closes.
func (s *Store) run(conn *streamConn) {
	defer s.wg.Done()
	for {
		err := s.receive(conn)
		conn.cancel()
		close(conn.done)
		s.mu.Lock()
		if s.st.conn == conn {
			s.st.conn = nil
		}
		closing := s.st.closing
		s.mu.Unlock()
		if closing {
			return
		}
		s.log.Warn("dlm remote: session stream broken, reconnecting", "err", err)
		if conn = s.reconnect(); conn == nil {
			return
		}
	}
}

// reconnect connects again with jittered exponential backoff (nextPause)
// until it succeeds (the stream) or the store closes (nil).
func (s *Store) reconnect() *streamConn {
	pause := s.opt.reconnect
	for {
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, max(s.opt.ttl/2, time.Second))
		conn, leaderless, err := s.connectOnce(ctx)
		cancel()
		if err == nil {
			return conn
		}
		s.log.Debug("dlm remote: reconnect failed", "err", err)
		if errors.Is(err, ErrStorage) {
			s.mu.Lock()
			s.st.storage = err
			s.mu.Unlock()
		}
		pause = nextPause(pause, leaderless)
	}
}

// receive dispatches the stream's messages until it ends.
func (s *Store) receive(conn *streamConn) error {
	for {
		m, err := conn.stream.Recv()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.dispatchLocked(conn, m)
		s.mu.Unlock()
	}
}

// keepalive sends a keepalive every interval while a stream is up.
func (s *Store) keepalive() {
	defer s.wg.Done()
	t := time.NewTicker(s.opt.interval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		conn := s.st.conn
		silent := conn != nil && time.Since(s.st.lastAck) > 2*s.opt.interval
		s.mu.Unlock()
		switch {
		case silent:
			// Acks stopped on a stream that looks open (a stopped,
			// dead or partitioned server): try another server while
			// the session is still valid.
			s.log.Warn("dlm remote: no keepalive ack, reconnecting", "after", 2*s.opt.interval)
			s.srv.failed(s.srv.current(), nil, nil)
			conn.cancel()
		case conn != nil:
			s.sendKeepAlive(conn)
		}
	}
}

// sendKeepAlive sends one keepalive, remembering when.
func (s *Store) sendKeepAlive(conn *streamConn) {
	s.mu.Lock()
	if s.st.sid == 0 {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	for seq, at := range s.st.kaSent { // unanswered for a whole TTL: useless
		if now.Sub(at) > s.st.ttl {
			delete(s.st.kaSent, seq)
		}
	}
	s.st.kaSeq++
	seq := s.st.kaSeq
	s.st.kaSent[seq] = now
	s.mu.Unlock()
	conn.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{
		Seq: seq, SentUnixNano: now.UnixNano(),
	}}})
}

// acked extends the session's validity for the keepalive sent at sent.
func (s *Store) ackedLocked(seq uint64) {
	sent, ok := s.st.kaSent[seq]
	if !ok {
		return
	}
	delete(s.st.kaSent, seq)
	s.st.lastAck, s.st.storage = time.Now(), nil
	if v := sent.Add(s.st.ttl - s.Drift(s.st.ttl)); v.After(s.st.validUntil) {
		s.st.validUntil = v
	}
}

// armLossLocked starts the timer that gives the session up at validUntil.
func (s *Store) armLossLocked() {
	if s.st.lossTimer != nil {
		s.st.lossTimer.Stop()
	}
	s.st.lossTimer = time.AfterFunc(time.Until(s.st.validUntil), s.checkLoss)
}

// checkLoss runs at the validity deadline: unless a keepalive ack moved it,
// the session is given up.
func (s *Store) checkLoss() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.sid == 0 || s.st.lossTimer == nil {
		return
	}
	if left := time.Until(s.st.validUntil); left > 0 {
		s.st.lossTimer.Reset(left)
		return
	}
	s.loseSessionLocked(fmt.Errorf("no keepalive was acknowledged within the session TTL of %s", s.st.ttl))
}

// loseSessionLocked gives the session up: every lock is lost, every request
// fails, and the next stream opens a new session. The server expires the
// old one after its TTL (or has already).
func (s *Store) loseSessionLocked(cause error) {
	if s.st.sid == 0 {
		return
	}
	level := slog.LevelWarn
	if s.st.closing && len(s.st.byOwner) == 0 {
		level = slog.LevelDebug // an ordinary Close
	}
	if s.st.storage != nil {
		cause = fmt.Errorf("%w; the server's log cannot be written: %w", cause, s.st.storage)
	}
	s.log.Log(context.Background(), level, "dlm remote: session ended", "session", s.st.sid, "locks", len(s.st.byOwner), "cause", cause)
	err := fmt.Errorf("%w: session %d lost: %w", driver.ErrUnavailable, s.st.sid, cause)
	for _, ls := range s.st.byOwner {
		if ls.waiter != nil {
			ls.waiter.finish(err)
		}
		s.st.lose(ls)
	}
	for _, c := range s.st.calls {
		c.finish(err)
	}
	s.st.init()
	s.st.sid, s.st.resume, s.st.validUntil = 0, nil, time.Time{}
	if s.st.lossTimer != nil {
		s.st.lossTimer.Stop()
		s.st.lossTimer = nil
	}
	if conn := s.st.conn; conn != nil {
		// The receive loop sees the stream end and connects again, with a
		// new session; the server expires the old one.
		s.st.conn = nil
		conn.cancel()
	}
}

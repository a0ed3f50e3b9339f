package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/fsm"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/raftnode"
)

// Session serves one session stream: see dlmpb.DLMServer.
func (s *Server) Session(stream dlmpb.DLM_SessionServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return status.Error(codes.InvalidArgument, "dlm server: the first message of a session stream must be an open request")
	}
	if !s.live.isActive() {
		return s.notLeader(stream)
	}
	p := s.auth.Caller(ctx)
	if !p.Authenticated() {
		return status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	if err := protocol.ValidateOpen(first); err != nil {
		return err
	}
	token := auth.PresentedToken(ctx)
	sid := locktable.SessionID(open.GetSession())
	var resumeToken []byte // a new session's, sent once in SessionOpened
	if sid == 0 {
		if sid, resumeToken, _, err = s.openSession(ctx, p, open.GetTtl(), open.GetLabel()); err != nil {
			return err
		}
	}

	var ob *outbox
	acc := accessGone
	s.node.FSM().Read(func(v fsm.View) {
		if acc = sessionAccess(v, p, sid, open.GetResumeToken(), open.GetSession() != 0); acc != accessOK {
			return
		}
		info, _ := v.Table().Session(sid)
		rec, _ := v.Session(sid)
		ob = s.hub.attach(sid)
		ob.push(
			&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Opened{Opened: &dlmpb.SessionOpened{
				Session: uint64(sid), Ttl: pbDuration(rec.TTL), Resumed: open.GetSession() != 0, ResumeToken: resumeToken,
			}}},
			&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Sync{Sync: &dlmpb.SessionSync{
				Session: uint64(sid), Index: v.Applied(), Locks: protocol.LockInfos(info.Locks, protocol.Source{}),
			}}},
		)
	})
	if acc == accessForeign {
		s.auth.Deny(p, auth.PermissionLock, fmt.Sprintf("(session %d)", sid))
		return permissionDenied(fmt.Sprintf("session %d was opened by another identity", sid))
	}
	if acc == accessBadToken {
		return s.refuseResume(ctx, p, sid)
	}
	if ob == nil {
		return stream.Send(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Expired{Expired: &dlmpb.SessionExpired{Session: uint64(sid)}}})
	}
	defer s.hub.detach(ob)
	defer ob.close()
	if !s.live.isActive() { // leadership lost since the check above
		ob.end(false, errNotLeader)
	}
	if open.GetSession() != 0 { // resumed: heard, though nothing is acknowledged
		s.live.touch(sid, time.Now(), func(time.Duration, bool) {})
	}
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()

	s.wg.Add(1)
	go s.read(ctx, stream, sid, ob, p, token)
	return s.write(ctx, stream, ob)
}

// write sends the outbox's messages until it ends or the stream breaks.
// The sends run in a goroutine of their own, started when messages wait and
// gone once the queue is empty (an idle stream costs no goroutine for it),
// so that an outbox ended without drain (a client too slow for its queue, a
// stream replaced, a leadership lost) ends the stream at once, even while a
// send waits for a client that does not read: returning from the handler
// closes the stream, which ends that send and frees the stream's buffers.
//
// A stream whose writes can be cut short (sessionConn) is written from the
// handler's goroutine itself, one hand-off less per message: once the
// outbox ends without drain, its write deadline passes at once.
func (s *Server) write(ctx context.Context, stream dlmpb.DLM_SessionServer, ob *outbox) error {
	if c, ok := stream.(*sessionConn); ok {
		return s.writeInline(ctx, c, ob)
	}
	var buf []*dlmpb.SessionResponse
	results := make(chan sendResult, 1)
	running := false
	for {
		wake := ob.wake
		if running {
			wake = nil // the sender takes what is pushed meanwhile
		}
		select {
		case <-wake:
			running = true
			s.wg.Add(1)
			go func(buf []*dlmpb.SessionResponse) {
				defer s.wg.Done()
				results <- sendQueued(stream, ob, buf)
			}(buf)
		case r := <-results:
			running, buf = false, r.buf
			if r.done {
				return r.err
			}
		case <-ob.aborted:
			return endStatus(ob.reason())
		case <-ctx.Done():
			ob.end(false, ctx.Err())
			return ctx.Err()
		}
	}
}

// writeInline is write for a sessionConn.
func (s *Server) writeInline(ctx context.Context, c *sessionConn, ob *outbox) error {
	ob.setOnAbort(c.cutWrites)
	var buf []*dlmpb.SessionResponse
	for {
		select {
		case <-ob.wake:
			r := sendQueued(c, ob, buf)
			if r.done {
				select {
				case <-ob.aborted: // why it ended, rather than the write it cut
					return endStatus(ob.reason())
				default:
					return r.err
				}
			}
			buf = r.buf
		case <-ob.aborted:
			return endStatus(ob.reason())
		case <-ctx.Done():
			ob.end(false, ctx.Err())
			return ctx.Err()
		}
	}
}

// sendResult is how a run of sendQueued ended: the queue was empty (done
// false; buf is the buffer to reuse), or the stream is over (done, with
// the handler's status).
type sendResult struct {
	buf  []*dlmpb.SessionResponse
	done bool
	err  error
}

// sendQueued sends the outbox's messages until its queue is empty or it
// has ended. Sent messages stop counting against the queue's bounds.
func sendQueued(stream dlmpb.DLM_SessionServer, ob *outbox, buf []*dlmpb.SessionResponse) sendResult {
	for {
		msgs, ended, err := ob.take(buf)
		for _, m := range msgs {
			if serr := stream.Send(m); serr != nil {
				ob.end(false, serr)
				return sendResult{done: true, err: serr}
			}
		}
		if f, ok := stream.(flusher); ok && len(msgs) > 0 {
			if ferr := f.Flush(); ferr != nil {
				ob.end(false, ferr)
				return sendResult{done: true, err: ferr}
			}
		}
		ob.sent(msgs)
		clear(msgs)
		buf = msgs
		if ended {
			return sendResult{done: true, err: endStatus(err)}
		}
		if len(msgs) == 0 {
			return sendResult{buf: buf}
		}
	}
}

// flusher is a stream whose Send only queues (sessionConn): Flush writes.
type flusher interface{ Flush() error }

// How a stream learns the outcome of its requests. The answer to every
// request that was applied (granted, queued, refused by the table...) comes
// through the hub, from the state machine's observer, in log order. What
// the hub cannot tell is a request whose entry failed: not appended, or its
// outcome unknown (leadership lost, node closed). The node itself tells
// each submission's outcome, from its own goroutine and in submission order
// while it runs (raftnode.Node.Submit), so no goroutine of the stream waits
// on its requests: outcome, the function the stream hands the node with
// each request, refuses the request if it failed; if it was applied, it
// only gives back the request's inflight slot.

// inflight bounds one stream's requests handed to the node whose outcome
// is not known yet (Config.MaxStreamInflight): a slot is taken before a
// request is submitted, and given back once the node reports its outcome;
// while every slot is taken, the stream's reader waits. Its elements take
// no memory.
type inflight chan struct{}

// take takes a slot, waiting while none is free; it fails only with ctx's
// error. A free slot is taken even if ctx has ended.
func (q inflight) take(ctx context.Context) error {
	select {
	case q <- struct{}{}:
		return nil
	default:
	}
	select {
	case q <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// give gives a slot back.
func (q inflight) give() { <-q }

// outcome returns what the node calls with the outcome of request id, one
// of the stream's: if it failed, it is refused with REASON_NOT_LEADER (it
// was not applied, or its outcome is unknown; the client retries it with
// the same request id on the leader, where a duplicate is answered from the
// reply cache); either way its slot is given back. It never blocks.
func outcome(ob *outbox, id *dlmpb.RequestID, slots inflight) func([]fsm.Result, error) {
	return func(_ []fsm.Result, err error) {
		if err != nil {
			ob.push(refused(id, failedReason(err), err.Error()))
		}
		slots.give()
	}
}

// read takes the client's messages until the stream ends. Requests are
// handed to the node in arrival order; their answers come through the hub.
// A request p may not make is refused (REASON_PERMISSION_DENIED) and
// changes nothing; the stream goes on. A request the node does not take
// is refused (REASON_NOT_LEADER) and ends the stream. token, the bearer
// token the stream was opened with, is kept out of lock metadata.
// Keepalives are listed for acknowledgement without waiting.
func (s *Server) read(ctx context.Context, stream dlmpb.DLM_SessionServer, sid locktable.SessionID, ob *outbox, p auth.Principal, token string) {
	defer s.wg.Done()
	slots := make(inflight, s.cfg.MaxStreamInflight)
	for {
		m, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("dlm server: session %d: %w", sid, err)
			} else {
				err = nil
			}
			ob.end(false, err)
			return
		}
		if ob.isEnded() {
			return // a slow client's, or replaced: its requests are no longer taken
		}
		if ka := m.GetKeepAlive(); ka != nil {
			ttl, deferred, ok := s.live.touch(sid, time.Now(), func(ttl time.Duration, ok bool) {
				if ok { // the checkpoint that records the session heard confirms the leadership too
					ob.push(keepaliveAckOf(ka, ttl))
				}
			})
			if ok && !deferred {
				s.kas.add(ob, &keepaliveAck{ka: ka, ttl: ttl})
			}
			continue
		}
		if m.GetOpen() != nil {
			ob.end(false, status.Error(codes.InvalidArgument, "dlm server: open sent twice on one stream"))
			return
		}
		cmd, id, err := protocol.RequestCommand(sid, m)
		if err != nil {
			ob.push(refused(id, protocol.RefusalReason(err), err.Error()))
			continue
		}
		if msg, ok := s.authorize(p, sid, cmd); !ok {
			ob.push(refused(id, dlmpb.Reason_REASON_PERMISSION_DENIED, msg))
			continue
		}
		if lk := cmd.GetLock(); lk != nil && token != "" {
			lk.Metadata = redactTokenBytes(lk.GetMetadata(), token)
		}
		if rl := cmd.GetRelabel(); rl != nil && token != "" {
			rl.Metadata = redactTokenBytes(rl.GetMetadata(), token)
		}
		if err := slots.take(ctx); err != nil {
			return // the stream is gone
		}
		if err := s.node.Submit(ctx, outcome(ob, id, slots), cmd); err != nil {
			slots.give()
			ob.push(refused(id, failedReason(err), err.Error()))
			ob.end(true, fmt.Errorf("dlm server: session %d: %w", sid, err))
			return
		}
	}
}

// sessionTTL validates a requested session TTL; nil means the default.
func sessionTTL(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return DefaultSessionTTL, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fmt.Errorf("dlm server: session ttl: %w", err)
	}
	ttl := d.AsDuration()
	if ttl < MinSessionTTL || ttl > MaxSessionTTL {
		return 0, fmt.Errorf("dlm server: session ttl %s is outside [%s, %s]", ttl, MinSessionTTL, MaxSessionTTL)
	}
	return ttl, nil
}

func refused(id *dlmpb.RequestID, reason dlmpb.Reason, msg string) *dlmpb.SessionResponse {
	return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Refused{Refused: &dlmpb.Refused{Id: id, Reason: reason, Message: msg}}}
}

func pbDuration(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// failedReason is the reason of a request whose proposal failed:
// REASON_STORAGE while this node cannot write its log, else
// REASON_NOT_LEADER.
func failedReason(err error) dlmpb.Reason {
	if errors.Is(err, raftnode.ErrStorage) {
		return dlmpb.Reason_REASON_STORAGE
	}
	return dlmpb.Reason_REASON_NOT_LEADER
}

// proposeStatus maps a proposal error to a gRPC status: a refusal with
// REASON_STORAGE while this node cannot write its log.
func proposeStatus(err error) error {
	switch {
	case errors.Is(err, raftnode.ErrStorage):
		return &refusal{code: codes.Unavailable, reason: dlmpb.Reason_REASON_STORAGE, msg: err.Error()}
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// refusalStatus maps a table refusal of an open to a gRPC status.
func refusalStatus(err error) error {
	switch {
	case errors.Is(err, locktable.ErrTooManySessions), errors.Is(err, fsm.ErrQuota):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, locktable.ErrLimit), errors.Is(err, locktable.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

// endStatus maps why an outbox ended to the stream's status.
func endStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errSlowClient):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, errReplaced):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, errNotLeader), errors.Is(err, errShutdown):
		return status.Error(codes.Unavailable, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

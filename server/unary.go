package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/protocol"
)

// The unary lock API (dlm.v1.Locks): each call is one request and one
// answer, for clients that do not speak the Session stream. It is served
// over gRPC (unary itself) and in the Connect protocol (locksConnect, a thin
// adapter; unary_transport.go). Every change is a command of the same state machine
// the stream feeds, built and checked by the same functions (package
// protocol); what is particular to this API is how a call learns the
// outcome of a queued request: it waits on the session's mailbox
// (unary_acquire.go). Sessions are named by handles (unary_session.go);
// refusals carry their Reason (unary_errors.go).

// withdrawTimeout bounds the proposal that withdraws the request of a call
// whose client hung up.
const withdrawTimeout = 10 * time.Second

// unary implements the Locks service on a Server.
type unary struct {
	dlmpb.UnimplementedLocksServer
	s *Server
}

// propose runs cmd through the log and returns its result. It does not
// stop when ctx ends (a hung-up client's request is withdrawn by the
// caller, which must know whether it applied), but gives up after
// withdrawTimeout.
func (u unary) propose(ctx context.Context, cmd *dlmpb.Command) (fsm.Result, error) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	res, err := u.s.node.Propose(pctx, cmd)
	if err != nil {
		return fsm.Result{}, proposeStatus(err)
	}
	return res[0], nil
}

// OpenSession opens a session.
func (u unary) OpenSession(ctx context.Context, req *dlmpb.OpenSessionRequest) (*dlmpb.OpenSessionResponse, error) {
	p, err := u.caller(ctx)
	if err != nil {
		return nil, err
	}
	if !u.s.live.isActive() {
		return nil, u.notLeader(ctx)
	}
	if err := protocol.ValidateOpen(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: req.GetLabel()}}}); err != nil {
		return nil, refuse(err)
	}
	sid, tok, ttl, err := u.s.openSession(ctx, p, req.GetTtl(), req.GetLabel())
	if err != nil {
		return nil, err
	}
	return &dlmpb.OpenSessionResponse{Session: protocol.SessionHandle(sid, tok), SessionId: uint64(sid), Ttl: durationpb.New(ttl)}, nil
}

// KeepAlive keeps a session alive and returns its events.
func (u unary) KeepAlive(ctx context.Context, req *dlmpb.KeepAliveRequest) (*dlmpb.KeepAliveResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	ttl, ok := u.s.live.touch(sid, time.Now())
	if !ok {
		return nil, &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION,
			msg: fmt.Sprintf("dlm server: session %d has expired: its locks are lost", sid)}
	}
	// Acknowledge only once leadership is confirmed after the keepalive
	// arrived: a client never counts on an acknowledgement of a deposed
	// leader.
	if err := u.s.node.VerifyLeader(); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	// held is the state after every request submitted before this
	// keepalive, releases answered early included.
	if err := u.s.node.Settle(ctx); err != nil {
		return nil, proposeStatus(err)
	}
	resp := &dlmpb.KeepAliveResponse{Ttl: durationpb.New(ttl), Events: mb.takeEvents()}
	u.s.node.FSM().Read(func(v fsm.View) {
		if info, ok := v.Table().Session(sid); ok {
			for _, l := range info.Locks {
				resp.Held = append(resp.Held, uint64(l.ID))
			}
		}
	})
	return resp, nil
}

// Release releases a lock.
func (u unary) Release(ctx context.Context, req *dlmpb.ReleaseLockRequest) (*dlmpb.ReleaseLockResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	cmd := &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{Session: uint64(sid), LockId: req.GetLockId()}}}
	if token, ok := u.releaseEarly(ctx, sid, mb, cmd); ok {
		return &dlmpb.ReleaseLockResponse{Token: token}, nil
	}
	mb.work.begin(req.GetLockId())
	r, err := u.propose(ctx, cmd)
	mb.work.end(req.GetLockId())
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	mb.forget(req.GetLockId())
	return &dlmpb.ReleaseLockResponse{Token: protocol.ReleasedToken(&r, locktable.LockID(req.GetLockId()))}, nil
}

// Cancel withdraws the queued part of a lock: a request not granted yet
// (the lock is then gone), or a pending conversion (the lock keeps its
// mode).
func (u unary) Cancel(ctx context.Context, req *dlmpb.CancelLockRequest) (*dlmpb.CancelLockResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	mb.work.begin(req.GetLockId())
	defer mb.work.end(req.GetLockId())
	r, err := u.propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{Session: uint64(sid), LockId: req.GetLockId()}}})
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	resp := &dlmpb.CancelLockResponse{}
	for _, e := range r.Events {
		if e.Kind == locktable.EventCancelled && uint64(e.Lock) == req.GetLockId() {
			resp.Conversion = e.Conversion
		}
	}
	return resp, nil
}

// releaseEarly answers release cmd of session sid before it is applied,
// as a stream's release is (see releaseEarly of the stream): if the lock
// is granted to the session in the applied state, nobody waits on its
// resource and no other call of the session naming the lock is in flight.
// The release is submitted lazily and the caller answers at once with the
// grant's token. If the entry is lost with a leader, the lock stays with
// the session, and KeepAlive lists it among the session's locks (held),
// where the client finds a lock it released and releases it again.
func (u unary) releaseEarly(ctx context.Context, sid locktable.SessionID, mb *mailbox, cmd *dlmpb.Command) (uint64, bool) {
	lock := cmd.GetRelease().GetLockId()
	if !mb.work.idle(lock) {
		return 0, false
	}
	var info locktable.LockInfo
	ok := false
	u.s.node.FSM().Read(func(v fsm.View) { info, ok = releasable(v, sid, lock) })
	if !ok {
		return 0, false
	}
	mb.work.begin(lock)
	done := func(_ []fsm.Result, err error) {
		mb.work.end(lock)
		if err != nil {
			u.s.log.Warn("dlm server: a release answered early was not applied; the session's next keepalive lists the lock", "session", sid, "lock", lock, "err", err)
		}
	}
	if err := u.s.node.SubmitLazy(context.WithoutCancel(ctx), lazyRelease, done, cmd); err != nil {
		mb.work.end(lock)
		return 0, false
	}
	mb.forget(lock)
	u.s.metrics.earlyReleases.Inc()
	return info.Token, true
}

// List lists resources, as DLM.List.
func (u unary) List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error) {
	if _, err := u.caller(ctx); err != nil {
		return nil, err
	}
	if err := protocol.ValidateList(req); err != nil {
		return nil, refuse(err)
	}
	return u.s.List(ctx, req)
}

// CloseSession ends a session.
func (u unary) CloseSession(ctx context.Context, req *dlmpb.CloseSessionRequest) (*dlmpb.CloseSessionResponse, error) {
	_, sid, _, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	r, err := u.propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_CloseSession{CloseSession: &dlmpb.CloseSessionCmd{Session: uint64(sid)}}})
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	return &dlmpb.CloseSessionResponse{}, nil
}

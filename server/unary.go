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
	heard := make(chan bool, 1)
	ttl, deferred, ok := u.s.live.touch(sid, time.Now(), func(_ time.Duration, ok bool) { heard <- ok })
	if !ok {
		return nil, &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION,
			msg: fmt.Sprintf("dlm server: session %d has expired: its locks are lost", sid)}
	}
	// Acknowledge only once leadership is confirmed after the keepalive
	// arrived: a client never counts on an acknowledgement of a deposed
	// leader. A session recorded silent waits for the entry that records
	// it heard, which confirms the leadership too.
	if deferred {
		select {
		case ok = <-heard:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if !ok {
			return nil, status.Error(codes.Unavailable, "dlm server: the keepalive could not be recorded (leadership changed, or the session ended)")
		}
	} else if err := u.s.node.VerifyLeader(); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	// held is the state after every request submitted before this
	// keepalive.
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
	r, err := u.propose(ctx, cmd)
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
	_, sid, _, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
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

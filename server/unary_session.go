package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/protocol"
)

// caller returns the call's principal, refusing an unauthenticated one.
func (u unary) caller(ctx context.Context) (auth.Principal, error) {
	p := u.s.auth.Caller(ctx)
	if !p.Authenticated() {
		return p, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	return p, nil
}

// session checks a call's session handle on the serving leader and returns
// the session and its mailbox. A session that is gone is NOT_FOUND; one
// opened by another identity, or named with a wrong secret, is
// PERMISSION_DENIED.
func (u unary) session(ctx context.Context, handle string) (auth.Principal, locktable.SessionID, *mailbox, error) {
	p, err := u.caller(ctx)
	if err != nil {
		return p, 0, nil, err
	}
	if !u.s.live.isActive() {
		return p, 0, nil, u.notLeader(ctx)
	}
	sid, tok, err := protocol.ParseSessionHandle(handle)
	if err != nil {
		return p, 0, nil, refuse(err)
	}
	var mb *mailbox
	acc := accessGone
	u.s.node.FSM().Read(func(v fsm.View) {
		if acc = sessionAccess(v, p, sid, tok, true); acc == accessOK {
			mb = u.s.hub.mailbox(sid) // under Read: no session ends in between
		}
	})
	switch acc {
	case accessGone:
		return p, sid, nil, &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION,
			msg: fmt.Sprintf("dlm server: session %d is gone (expired, closed, or never opened): its locks are lost", sid)}
	case accessForeign:
		u.s.auth.Deny(p, auth.PermissionLock, fmt.Sprintf("(session %d)", sid))
		return p, sid, nil, &refusal{code: codes.PermissionDenied, reason: dlmpb.Reason_REASON_PERMISSION_DENIED,
			msg: fmt.Sprintf("%s: session %d was opened by another identity", auth.ErrPermissionDenied, sid)}
	case accessBadToken:
		u.s.log.Warn("dlm server: a unary call named a session with a wrong secret", "session", sid, "identity", p.Identity())
		return p, sid, nil, &refusal{code: codes.PermissionDenied, reason: dlmpb.Reason_REASON_BAD_RESUME_TOKEN,
			msg: fmt.Sprintf("%s: session %d: the handle's secret is not the session's", protocol.ErrBadResumeToken, sid)}
	}
	return p, sid, mb, nil
}

// notLeader is the error of a call on a node that does not serve: as
// DLM's (the leader's gRPC address in the message and the trailer), and
// the leader's HTTP address in the message, for JSON clients.
func (u unary) notLeader(ctx context.Context) error {
	err := u.s.notLeaderUnary(ctx)
	if _, httpAddr, ok := u.s.leaderAddrs(); ok && httpAddr != "" {
		if r, ok := err.(*refusal); ok {
			return &refusal{code: r.code, reason: r.reason, msg: r.msg + " (gRPC), " + httpAddr + " (HTTP)"}
		}
		return status.Error(codes.Unavailable, status.Convert(err).Message()+" (gRPC), "+httpAddr+" (HTTP)")
	}
	return err
}

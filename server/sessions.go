package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/fsm"
)

// Sessions as both APIs open and name them: the stream (Session) and the
// unary API (dlm.v1.Locks).

// openSession opens a new session of p with the TTL asked for (nil: the
// default) and label (the caller's bearer token taken out of it), and
// returns its id, its resume token (the secret the client keeps) and its
// TTL. Errors are gRPC statuses (a bad TTL a refusal, REASON_INVALID).
func (s *Server) openSession(ctx context.Context, p auth.Principal, ttlAsked *durationpb.Duration, label string) (locktable.SessionID, []byte, time.Duration, error) {
	ttl, err := sessionTTL(ttlAsked)
	if err != nil {
		return 0, nil, 0, &refusal{code: codes.InvalidArgument, reason: dlmpb.Reason_REASON_INVALID, msg: err.Error()}
	}
	tok, hash, err := fsm.NewResumeToken()
	if err != nil {
		return 0, nil, 0, status.Error(codes.Internal, err.Error())
	}
	res, err := s.node.Propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: redactToken(label, auth.PresentedToken(ctx)), TtlNanos: int64(ttl), Owner: p.Identity(), ResumeHash: hash,
	}}})
	if err != nil {
		return 0, nil, 0, proposeStatus(err)
	}
	if res[0].Err != nil {
		return 0, nil, 0, refusalStatus(res[0].Err)
	}
	return res[0].Session, tok, ttl, nil
}

// access is what a caller may do with a session it names.
type access int

const (
	accessOK       access = iota
	accessGone            // not open (expired, closed, never opened)
	accessForeign         // opened by another identity
	accessBadToken        // named without its resume token
)

// sessionAccess says whether p may use session sid, named with resume
// token tok (checked only when check is set: a stream that opened the
// session itself has no token to show). Sessions are used only by the
// identity that opened them, and only with the token they were given.
func sessionAccess(v fsm.View, p auth.Principal, sid locktable.SessionID, tok []byte, check bool) access {
	_, open := v.Table().Session(sid)
	rec, recorded := v.Session(sid)
	switch {
	case !open || !recorded:
		return accessGone
	case !p.IsUnrestricted() && rec.Owner != p.Identity():
		return accessForeign
	case check && !v.Resumable(sid, tok):
		return accessBadToken
	}
	return accessOK
}

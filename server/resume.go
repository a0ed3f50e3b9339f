package server

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/auth"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// refuseResume refuses a resume of session sid whose token did not match:
// it counts and logs the attempt (never the token), warns the session's
// stream if it has one on this node, and returns the caller's status.
func (s *Server) refuseResume(ctx context.Context, p auth.Principal, sid locktable.SessionID) error {
	from := "an unknown address"
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		from = pr.Addr.String()
	}
	s.metrics.resumeRefused.Inc()
	s.log.Warn("dlm server: refused a resume with a wrong or missing resume token", "session", uint64(sid), "remote", from, "identity", p.Identity())
	s.hub.warn(sid, &dlmpb.SessionWarning{
		Reason:  dlmpb.Reason_REASON_BAD_RESUME_TOKEN,
		Message: fmt.Sprintf("dlm server: a resume of session %d from %s with a wrong or missing resume token was refused; this stream and the session go on", sid, from),
	})
	return status.Error(codes.PermissionDenied, fmt.Sprintf("%s: session %d: a resume needs the session's resume token (SessionOpened.resume_token)", protocol.ErrBadResumeToken, sid))
}

// warn sends w to session sid's stream, if it has one on this node.
func (h *hub) warn(sid locktable.SessionID, w *dlmpb.SessionWarning) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ob := h.boxes[sid]; ob != nil {
		ob.pushWarning(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Warning{Warning: w}})
	}
}

// pushWarning queues warning m unless a warning is queued already: a flood
// of refused resumes tells the session once per read of its stream, and
// cannot fill its queue (which would end the stream as a slow client's).
func (o *outbox) pushWarning(m *dlmpb.SessionResponse) {
	o.mu.Lock()
	for _, q := range o.msgs {
		if q.GetWarning() != nil {
			o.mu.Unlock()
			return
		}
	}
	o.mu.Unlock()
	o.push(m)
}

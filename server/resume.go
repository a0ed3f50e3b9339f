package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// ResumeTokenBytes is the size of a session's resume token: 128 random
// bits from crypto/rand, made by the leader when it opens the session and
// returned once, in SessionOpened.resume_token. Resuming the session needs
// it; the server keeps only its SHA-256 (in the Raft log and snapshots) and
// never logs or lists the token.
const ResumeTokenBytes = 16

// newResumeToken returns a new resume token and its SHA-256.
func newResumeToken() (token, hash []byte, err error) {
	token = make([]byte, ResumeTokenBytes)
	if _, err := rand.Read(token); err != nil {
		return nil, nil, fmt.Errorf("dlm server: resume token: %w", err)
	}
	return token, resumeHash(token), nil
}

// resumeHash is the SHA-256 of a resume token, as the FSM keeps it.
func resumeHash(token []byte) []byte {
	h := sha256.Sum256(token)
	return h[:]
}

// resumableWith reports whether token is the session's resume token, in
// constant time. A session recorded without a hash (opened by an older
// server) cannot be resumed.
func (s *sessionRecord) resumableWith(token []byte) bool {
	if len(s.resumeHash) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(resumeHash(token), s.resumeHash) == 1
}

// refuseResume refuses a resume of session sid whose token did not match:
// it counts and logs the attempt (never the token), warns the session's
// stream if it has one on this node, and returns the caller's status.
func (s *Server) refuseResume(ctx context.Context, p principal, sid locktable.SessionID) error {
	from := "an unknown address"
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		from = pr.Addr.String()
	}
	s.metrics.resumeRefused.Inc()
	s.log.Warn("dlm server: refused a resume with a wrong or missing resume token", "session", uint64(sid), "remote", from, "identity", p.identity)
	s.hub.warn(sid, &dlmpb.SessionWarning{
		Reason:  dlmpb.Reason_REASON_BAD_RESUME_TOKEN,
		Message: fmt.Sprintf("dlm server: a resume of session %d from %s with a wrong or missing resume token was refused; this stream and the session go on", sid, from),
	})
	return status.Error(codes.PermissionDenied, fmt.Sprintf("%s: session %d: a resume needs the session's resume token (SessionOpened.resume_token)", ErrBadResumeToken, sid))
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

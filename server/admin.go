package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/protocol"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// KillBatch is how many sessions one ExpireSessions command of
// KillSessions names; more go in several commands of one proposal.
const KillBatch = 1000

// requireAdmin returns nil if the caller of ctx may administer sessions
// (the admin permission; anyone without authentication), else its gRPC
// error.
func (s *Server) requireAdmin(ctx context.Context, what string) (auth.Principal, error) {
	p := s.auth.Caller(ctx)
	if !p.Authenticated() {
		return p, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	if !p.MayAny(auth.PermissionAdmin) {
		s.auth.Deny(p, auth.PermissionAdmin, "")
		return p, permissionDenied("identity " + p.Identity() + " may not " + what + ": that needs the admin permission")
	}
	return p, nil
}

// ListSessions lists open sessions in id order, with the identity that
// opened each: see dlmpb.DLMServer. It reads this node's state (on a
// follower, expires_in is absent and the state may lag). With
// authentication, it needs the admin permission.
func (s *Server) ListSessions(ctx context.Context, req *dlmpb.ListSessionsRequest) (*dlmpb.ListSessionsResponse, error) {
	if _, err := s.requireAdmin(ctx, "list sessions"); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	owner, after := req.GetOwner(), locktable.SessionID(req.GetAfter())
	resp := &dlmpb.ListSessionsResponse{}
	f := s.node.FSM()
	f.Read(func(v fsm.View) {
		t := v.Table()
		var ids []locktable.SessionID
		for _, rec := range v.Sessions() {
			if rec.ID > after && (owner == "" || rec.Owner == owner) {
				ids = append(ids, rec.ID)
			}
		}
		if len(ids) > limit {
			ids = ids[:limit]
			resp.Next = uint64(ids[limit-1])
		}
		src := s.source(v, time.Now(), true)
		for _, id := range ids {
			si, _ := t.Session(id)
			resp.Sessions = append(resp.Sessions, protocol.SessionSummary(si, src))
		}
		if owner != "" {
			sessions, locks := v.Usage(owner)
			resp.OwnerSessions, resp.OwnerLocks = int64(sessions), int64(locks)
			q := f.Quotas()
			resp.SessionQuota, resp.LockQuota = int64(q.SessionsPerIdentity), int64(q.LocksPerIdentity)
		}
	})
	return resp, nil
}

// KillSessions ends sessions, named by id or by owner: see
// dlmpb.DLMServer. The leader proposes ExpireSessions commands (KillBatch
// ids each), so the sessions' locks are released, what they awaited is
// cancelled, every holder is told as on expiry and the sessions' streams
// get SessionExpired. It answers the sessions that were open and are
// ended. With authentication, it needs the admin permission.
func (s *Server) KillSessions(ctx context.Context, req *dlmpb.KillSessionsRequest) (*dlmpb.KillSessionsResponse, error) {
	p, err := s.requireAdmin(ctx, "end sessions")
	if err != nil {
		return nil, err
	}
	if (len(req.GetSessions()) == 0) == (req.GetOwner() == "") {
		return nil, status.Error(codes.InvalidArgument, "dlm server: name the sessions to end by id or by owner, not both")
	}
	if !s.live.isActive() {
		return nil, s.notLeaderUnary(ctx)
	}
	ids := slices.Clone(req.GetSessions())
	if owner := req.GetOwner(); owner != "" {
		for _, rec := range s.node.FSM().Sessions() {
			if rec.Owner == owner {
				ids = append(ids, uint64(rec.ID))
			}
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var cmds []*dlmpb.Command
	for chunk := range slices.Chunk(ids, KillBatch) {
		cmds = append(cmds, &dlmpb.Command{Op: &dlmpb.Command_ExpireSessions{ExpireSessions: &dlmpb.ExpireSessionsCmd{Sessions: chunk}}})
	}
	resp := &dlmpb.KillSessionsResponse{Sessions: []uint64{}}
	if len(cmds) > 0 {
		rs, err := s.node.Propose(ctx, cmds...)
		if errors.Is(err, raftnode.ErrNotLeader) {
			return nil, s.notLeaderUnary(ctx)
		}
		if err != nil {
			return nil, proposeStatus(err)
		}
		for _, r := range rs {
			for _, e := range r.Events {
				if e.Kind == locktable.EventSessionExpired {
					resp.Sessions = append(resp.Sessions, uint64(e.Session))
				}
			}
		}
	}
	s.log.Info("dlm server: sessions ended by an administrator", "identity", p.Identity(),
		"owner", req.GetOwner(), "asked", len(req.GetSessions()), "ended", len(resp.Sessions))
	return resp, nil
}

// CopyState returns an online copy of the replicated state, as of the
// last entry this node applied (a follower's may lag the leader's), for
// GET /v1/admin/snapshot. The caller is authorized by the HTTP API (the
// admin permission); the copy is logged with its identity.
func (s *Server) CopyState(ctx context.Context) (raftnode.SnapshotFile, error) {
	snap, err := s.node.Copy()
	if err != nil {
		return snap, err
	}
	s.log.Info("dlm server: state copied by an administrator", "identity", s.auth.Caller(ctx).Identity(),
		"index", snap.Index, "bytes", len(snap.State))
	return snap, nil
}

// notLeaderUnary is the error of a unary call that only the leader serves,
// made on another node; it names the leader in the call's trailer (and its
// message) when it is known.
func (s *Server) notLeaderUnary(ctx context.Context) error {
	msg := "dlm server: this node is not the leader, or not ready yet"
	client, _, ok := s.leaderAddrs()
	if ok {
		msg += "; the leader serves at " + client
	}
	if r, failing := s.storageRefusal(client); failing {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(cluster.LeaderHeader, client)) // the reason: see reasonTrailer
		return r
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(cluster.LeaderHeader, client))
	return status.Error(codes.Unavailable, msg)
}

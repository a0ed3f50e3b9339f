package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// Listing page sizes.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// List lists resources in name order: see dlmpb.DLMServer. It reads this
// node's state, which on a follower may lag the leader's. With
// authentication, it needs the list permission on some prefix
// (PermissionDenied otherwise) and lists only the resources it covers.
func (s *Server) List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error) {
	p := s.caller(ctx)
	if !p.authenticated() {
		return nil, status.Error(codes.Unauthenticated, ErrUnauthenticated.Error())
	}
	if !p.mayAny(PermissionList) {
		s.auth.deny(p, PermissionList, req.GetPrefix())
		return nil, permissionDenied("identity " + p.identity + " may list nothing")
	}
	sc := scopeOf(p)
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	resp := &dlmpb.ListResponse{}
	s.node.FSM().View(func(t *locktable.Table) {
		infos := sc.resources(t, req.GetPrefix(), req.GetAfter(), limit+1)
		if len(infos) > limit {
			infos = infos[:limit]
			resp.Next = infos[limit-1].Name
		}
		resp.Resources = make([]*dlmpb.ResourceInfo, len(infos))
		now := time.Now()
		for i, r := range infos {
			ri := resourceInfoPB(r, s.node.fsm.metadataOf)
			for _, q := range [][]*dlmpb.LockInfo{ri.Holders, ri.Converting, ri.Waiting} {
				for _, l := range q {
					if d, ok := s.live.deadline(locktable.SessionID(l.Session)); ok {
						l.SessionExpiresInMs = max(d.Sub(now).Milliseconds(), 1)
					}
				}
			}
			resp.Resources[i] = ri
		}
	})
	return resp, nil
}

// Status describes the node and its state: see dlmpb.DLMServer. With
// authentication, it needs the list permission on some prefix.
func (s *Server) Status(ctx context.Context, _ *dlmpb.StatusRequest) (*dlmpb.StatusResponse, error) {
	p := s.caller(ctx)
	if !p.authenticated() {
		return nil, status.Error(codes.Unauthenticated, ErrUnauthenticated.Error())
	}
	if !p.mayAny(PermissionList) {
		s.auth.deny(p, PermissionList, "")
		return nil, permissionDenied("identity " + p.identity + " has no list permission")
	}
	var st locktable.Stats
	s.node.FSM().View(func(t *locktable.Table) { st = t.Stats() })
	leaderAddr, _ := s.node.raft.LeaderWithID()
	return &dlmpb.StatusResponse{
		NodeId:        s.node.cfg.ID,
		Leader:        s.Ready(),
		LeaderAddress: string(leaderAddr),
		AppliedIndex:  s.node.FSM().AppliedIndex(),
		LastToken:     st.LastToken,
		Sessions:      int64(st.Sessions),
		Resources:     int64(st.Resources),
		Locks:         int64(st.Locks),
		Pending:       int64(st.Pending),
		NowUnixNano:   time.Now().UnixNano(),
	}, nil
}

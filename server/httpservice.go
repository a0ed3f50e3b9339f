package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/httpapi"
	"github.com/dlmhq/dlm/server/raftnode"
)

// httpService is the server as its HTTP API (package httpapi) sees it.
type httpService struct{ s *Server }

var _ httpapi.Service = httpService{}

// Ready, List, Status, ListSessions and KillSessions are the server's.
func (h httpService) Ready() bool { return h.s.Ready() }

// NotReady is the server's.
func (h httpService) NotReady() string { return h.s.NotReady() }

func (h httpService) List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error) {
	return h.s.List(ctx, req)
}

func (h httpService) Status(ctx context.Context, req *dlmpb.StatusRequest) (*dlmpb.StatusResponse, error) {
	return h.s.Status(ctx, req)
}

func (h httpService) ListSessions(ctx context.Context, req *dlmpb.ListSessionsRequest) (*dlmpb.ListSessionsResponse, error) {
	return h.s.ListSessions(ctx, req)
}

func (h httpService) KillSessions(ctx context.Context, req *dlmpb.KillSessionsRequest) (*dlmpb.KillSessionsResponse, error) {
	return h.s.KillSessions(ctx, req)
}

// CopyState is the server's CopyState.
func (h httpService) CopyState(ctx context.Context) (raftnode.SnapshotFile, error) {
	return h.s.CopyState(ctx)
}

// Applied returns the state machine's applied index.
func (h httpService) Applied() uint64 { return h.s.node.FSM().AppliedIndex() }

// Leadership is the node's.
func (h httpService) Leadership() (bool, <-chan struct{}) { return h.s.node.Leadership() }

// Members returns the Raft configuration and the leader.
func (h httpService) Members() (*dlmpb.MemberList, error) {
	members, err := h.s.node.Members()
	if err != nil {
		return nil, err
	}
	id, addr := h.s.node.Leader()
	return &dlmpb.MemberList{LeaderId: id, LeaderAddress: addr, Members: protocol.Members(members)}, nil
}

// AddMember adds a voter. Over Raft TLS, the leader first checks that it
// can reach the new node: one it cannot authenticate (or that cannot
// authenticate the leader) would join and never replicate, so it is
// refused now, with the reason.
func (h httpService) AddMember(ctx context.Context, req cluster.JoinRequest) error {
	s := h.s
	if s.node.Secure() && s.node.IsLeader() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.node.Probe(pctx, req.RaftAddr)
		cancel()
		if err != nil {
			s.log.Warn("dlm server: join refused: the new node's Raft address fails the TLS handshake", "id", req.ID, "raft_addr", req.RaftAddr, "err", err)
			return fmt.Errorf("%w: the leader cannot reach %s over Raft TLS: %v", httpapi.ErrBadRequest, req.RaftAddr, err)
		}
	}
	return membershipErr(s.node.AddVoter(ctx, req.ID, req.RaftAddr))
}

// RemoveMember removes server id from the cluster.
func (h httpService) RemoveMember(ctx context.Context, id string) error {
	return membershipErr(h.s.node.RemoveServer(ctx, id))
}

// membershipErr makes a change refused for want of leadership match
// raftnode.ErrNotLeader.
func membershipErr(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("%w: %v", raftnode.ErrNotLeader, err)
	}
	return err
}

// LeaderHTTP returns the leader's HTTP address, if it is another node.
func (h httpService) LeaderHTTP() (string, bool) {
	_, addr, ok := h.s.leaderAddrs()
	return addr, ok
}

// Sessions lists the open sessions and their locks, in id order; for a
// caller whose list permission does not cover every name, only the
// sessions that hold or await a resource it covers, each with those locks
// only. A page holds at most limit sessions and locks locks (see the page
// constants); a session with more locks than are left is cut and continued
// on the next page.
func (h httpService) Sessions(p auth.Principal, cursor string, limit, locks int) (*dlmpb.SessionPage, error) {
	s := h.s
	after, skip, err := parseSessionCursor(cursor)
	if err != nil {
		return nil, fmt.Errorf("%w: after: %v", httpapi.ErrBadRequest, err)
	}
	limit, locks = pageBounds(limit, locks)
	sc := scopeOf(p)
	out := &dlmpb.SessionPage{}
	s.node.FSM().Read(func(v fsm.View) {
		page, more := s.visibleSessions(v.Table(), sc, locktable.SessionQuery{After: after, Skip: skip, MaxSessions: limit, MaxLocks: locks})
		if more {
			out.Next = sessionCursor(page[len(page)-1])
		}
		src := s.source(v, time.Now(), false)
		for _, si := range page {
			out.Sessions = append(out.Sessions, protocol.SessionInfo(si, src))
		}
	})
	return out, nil
}

// visibleSessions returns the page q selects of the sessions that hold or
// await a resource sc covers (every session if it covers every name), each
// with those locks only, and whether more follow. The caller is inside
// View.
func (s *Server) visibleSessions(t *locktable.Table, sc listScope, q locktable.SessionQuery) ([]locktable.SessionInfo, bool) {
	keep, ok := keepOf(sc)
	if !ok {
		return nil, false
	}
	q.Keep = keep
	return t.SessionPage(q)
}

// Bounds of a live feed snapshot (GET /v1/events).
const (
	// MaxEventQueue bounds the locks a snapshot lists per holder list,
	// conversion queue and wait queue of one resource (their full lengths
	// are given beside them).
	MaxEventQueue = 50
	// MaxEventLocks bounds the locks one snapshot lists in all; the lists
	// of the resources past it are cut short (full lengths still given).
	MaxEventLocks = 5000
)

// Snapshot checks the feed's prefix and limit, then takes the snapshot of
// what p may see.
func (h httpService) Snapshot(p auth.Principal, prefix string, limit int) (*dlmpb.EventSnapshot, error) {
	if err := protocol.ValidateListArgs(prefix, ""); err != nil {
		return nil, fmt.Errorf("%w: %v", httpapi.ErrBadRequest, err)
	}
	if len(prefix) > h.s.node.Limits().MaxNameLen {
		return nil, fmt.Errorf("%w: prefix: longer than any resource name", httpapi.ErrBadRequest)
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	return h.s.eventSnapshot(prefix, min(limit, MaxListLimit), scopeOf(p)), nil
}

// eventSnapshot takes a snapshot of the node and of the table's resources
// whose names begin with prefix and that sc covers, under one FSM read
// lock: each resource's lists cut at MaxEventQueue, and MaxEventLocks in
// all.
func (s *Server) eventSnapshot(prefix string, limit int, sc listScope) *dlmpb.EventSnapshot {
	snap := &dlmpb.EventSnapshot{Prefix: prefix, Limit: int32(limit)}
	if !sc.members {
		snap.MembersHidden = true
	} else if m, err := s.node.Members(); err == nil {
		snap.Members = protocol.Members(m)
	}
	s.node.FSM().Read(func(v fsm.View) {
		t := v.Table()
		snap.Status = s.status(v)
		src := s.source(v, snap.Status.GetNow().AsTime(), false)

		infos := sc.resources(t, prefix, "", limit+1)
		if len(infos) > limit {
			infos, snap.MoreResources = infos[:limit], true
		}
		budget := MaxEventLocks
		cut := func(ls []locktable.LockInfo) []locktable.LockInfo {
			n := min(len(ls), MaxEventQueue, budget)
			budget -= n
			return ls[:n]
		}
		var involved []locktable.SessionID // with a prefix: the sessions of the locks listed
		for _, r := range infos {
			r.Holders, r.Converting, r.Waiting = cut(r.Holders), cut(r.Converting), cut(r.Waiting)
			snap.Resources = append(snap.Resources, protocol.ResourceInfo(r, src))
			if prefix != "" || !sc.all() {
				for _, ls := range [][]locktable.LockInfo{r.Holders, r.Waiting} { // converting ones are holders
					for _, l := range ls {
						involved = append(involved, l.Session)
					}
				}
			}
		}

		var sessions []locktable.SessionInfo
		if prefix == "" && sc.all() {
			sessions = t.Sessions(0, limit+1)
		} else {
			slices.Sort(involved)
			involved = slices.Compact(involved)
			for _, id := range involved[:min(len(involved), limit+1)] {
				if si, ok := t.Session(id); ok {
					sessions = append(sessions, si)
				}
			}
		}
		if len(sessions) > limit {
			sessions, snap.MoreSessions = sessions[:limit], true
		}
		for _, si := range sessions {
			si.Locks = sc.locks(si.Locks)
			snap.Sessions = append(snap.Sessions, protocol.SessionSummary(si, src))
		}
	})
	return snap
}

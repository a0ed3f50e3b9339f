package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// Applied returns the state machine's applied index.
func (h httpService) Applied() uint64 { return h.s.node.FSM().AppliedIndex() }

// Leadership is the node's.
func (h httpService) Leadership() (bool, <-chan struct{}) { return h.s.node.Leadership() }

// Members returns the Raft configuration and the leader.
func (h httpService) Members() (*raftnode.MemberList, error) {
	members, err := h.s.node.Members()
	if err != nil {
		return nil, err
	}
	id, addr := h.s.node.Leader()
	return &raftnode.MemberList{LeaderID: id, LeaderAddress: addr, Members: members}, nil
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
func (h httpService) Sessions(p auth.Principal, cursor string, limit, locks int) (*httpapi.SessionPage, error) {
	s := h.s
	after, skip, err := parseSessionCursor(cursor)
	if err != nil {
		return nil, fmt.Errorf("%w: after: %v", httpapi.ErrBadRequest, err)
	}
	limit, locks = pageBounds(limit, locks)
	sc := scopeOf(p)
	out := &httpapi.SessionPage{Sessions: []httpapi.Session{}}
	s.node.FSM().Read(func(v fsm.View) {
		t := v.Table()
		page, more := s.visibleSessions(t, sc, locktable.SessionQuery{After: after, Skip: skip, MaxSessions: limit, MaxLocks: locks})
		if more {
			out.Next = sessionCursor(page[len(page)-1])
		}
		for _, si := range page {
			sj := httpapi.Session{ID: uint64(si.ID), Label: si.Label, OpenedAt: time.Unix(0, si.OpenedAt).UTC(), Locks: []httpapi.Lock{},
				LocksTotal: si.LocksTotal, First: si.First, Continues: si.Continues}
			for _, l := range si.Locks {
				sj.Locks = append(sj.Locks, lockOf(l, v.Metadata))
			}
			if rec, ok := v.Session(si.ID); ok {
				sj.TTL = rec.TTL.String()
			}
			if d, ok := s.live.deadline(si.ID); ok {
				sj.ExpiresIn = time.Until(d).Round(time.Millisecond).String()
			}
			out.Sessions = append(out.Sessions, sj)
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

// lockOf describes lock l for /v1/sessions.
func lockOf(l locktable.LockInfo, meta protocol.MetaFunc) httpapi.Lock {
	j := httpapi.Lock{ID: uint64(l.ID), Resource: l.Resource, State: l.State.String(), Permits: l.Permits, Token: l.Token, Metadata: string(meta(l.ID))}
	if l.Mode.Valid() {
		j.Mode = l.Mode.String()
	}
	if l.Requested.Valid() {
		j.Requested = l.Requested.String()
	}
	return j
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
func (h httpService) Snapshot(p auth.Principal, prefix string, limit int) (*httpapi.Snapshot, error) {
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
// lock.
func (s *Server) eventSnapshot(prefix string, limit int, sc listScope) *httpapi.Snapshot {
	snap := &httpapi.Snapshot{
		NodeID:    s.node.ID(),
		Ready:     s.Ready(),
		RaftState: strings.ToLower(s.node.State().String()),
		Prefix:    prefix,
		Limit:     limit,
		Members:   []raftnode.Member{},
		Resources: []httpapi.Resource{},
		Sessions:  []httpapi.EventSession{},
	}
	snap.LeaderID, snap.LeaderAddress = s.node.Leader()
	if !sc.members {
		snap.MembersHidden = true
	} else if m, err := s.node.Members(); err == nil {
		snap.Members = m
	}
	f := s.node.FSM()
	f.Read(func(v fsm.View) {
		t := v.Table()
		now := time.Now()
		snap.Time = now.UTC()
		snap.AppliedIndex = v.Applied()
		st := t.Stats()
		snap.Stats = httpapi.Stats{Sessions: st.Sessions, Resources: st.Resources, Locks: st.Locks, Waiters: st.Pending, LastToken: st.LastToken}

		infos := sc.resources(t, prefix, "", limit+1)
		if len(infos) > limit {
			infos, snap.MoreResources = infos[:limit], true
		}
		budget := MaxEventLocks
		nowNanos := now.UnixNano()
		list := func(ls []locktable.LockInfo) []httpapi.EventLock {
			n := min(len(ls), MaxEventQueue, budget)
			budget -= n
			out := make([]httpapi.EventLock, n)
			for i, l := range ls[:n] {
				out[i] = eventLockOf(l, v.Metadata, nowNanos)
			}
			return out
		}
		var involved []locktable.SessionID // with a prefix: the sessions of the locks listed
		for _, r := range infos {
			er := httpapi.Resource{
				Name: r.Name, Kind: r.Kind.String(), Capacity: r.Capacity, Used: r.Used,
				Holders: list(r.Holders), Converting: list(r.Converting), Waiting: list(r.Waiting),
				HoldersTotal: len(r.Holders), ConvertingTotal: len(r.Converting), WaitingTotal: len(r.Waiting),
			}
			snap.Resources = append(snap.Resources, er)
			if prefix != "" || !sc.all() {
				for _, ls := range [][]httpapi.EventLock{er.Holders, er.Waiting} { // converting ones are holders
					for _, l := range ls {
						involved = append(involved, locktable.SessionID(l.Session))
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
			es := httpapi.EventSession{ID: uint64(si.ID), Label: si.Label, OpenedAt: time.Unix(0, si.OpenedAt).UTC()}
			if rec, ok := v.Session(si.ID); ok {
				es.TTLMilli = rec.TTL.Milliseconds()
			}
			if d, ok := s.live.deadline(si.ID); ok {
				es.ExpiresInMillis = millis(d.Sub(now).Nanoseconds())
			}
			for _, l := range sc.locks(si.Locks) {
				switch l.State {
				case locktable.LockGranted:
					es.Held++
				case locktable.LockConverting:
					es.Held++
					es.Waiting++
				case locktable.LockWaiting:
					es.Waiting++
				}
			}
			snap.Sessions = append(snap.Sessions, es)
		}
	})
	return snap
}

// eventLockOf describes lock l as of now (Unix nanoseconds, table time).
func eventLockOf(l locktable.LockInfo, meta protocol.MetaFunc, now int64) httpapi.EventLock {
	e := httpapi.EventLock{
		ID: uint64(l.ID), Session: uint64(l.Session), Owner: uint64(l.Owner), State: l.State.String(),
		Permits: l.Permits, Token: l.Token, Metadata: string(meta(l.ID)),
	}
	if l.Mode.Valid() {
		e.Mode = l.Mode.String()
	}
	if l.Requested.Valid() {
		e.Requested = l.Requested.String()
	}
	if l.State != locktable.LockWaiting {
		e.HeldMillis = millis(now - l.GrantedAt)
	}
	if l.State != locktable.LockGranted {
		e.WaitedMillis = millis(now - l.QueuedAt)
		if l.Deadline != 0 {
			e.DeadlineMillis = millis(l.Deadline - now)
		}
	}
	return e
}

// millis converts nanoseconds to milliseconds, never below zero (the
// leader's stamps may be ahead of this node's clock).
func millis(nanos int64) *int64 {
	v := max(nanos, 0) / int64(time.Millisecond)
	return &v
}

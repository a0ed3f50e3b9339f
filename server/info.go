package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/fsm"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/buildinfo"
	"github.com/dlmhq/dlm/locktable"
)

// Listing page sizes, for List, GET /v1/resources and GET /v1/sessions. A
// page is bounded both by resources (sessions) and by locks: a resource
// (session) with more locks than are left is cut and continued on the
// next page. With names of 512 bytes (the default bound) and metadata of
// protocol.MaxMetadataBytes, the largest page is about 1.1 MB in gRPC and 1.4 MB in
// the JSON of /v1/resources, well inside gRPC's 4 MB.
const (
	// DefaultListLimit is the number of resources (sessions) of a page
	// when the request names none.
	DefaultListLimit = 100
	// MaxListLimit is the most resources (sessions) a page holds.
	MaxListLimit = 1000
	// DefaultListLocks is the number of locks of a page when the request
	// names none: entries of holders, converting and waiting taken
	// together (a converting lock is in two of them), or a session's
	// locks.
	DefaultListLocks = 500
	// MaxListLocks is the most locks a page holds.
	MaxListLocks = 500
)

// ErrBadCursor means a listing was asked to go on from a position that no
// page of this server gives as next.
var ErrBadCursor = errors.New("dlm server: not a listing cursor")

// cursorSep separates a name from a position in a cursor: no resource name
// holds it.
const cursorSep = "\x00"

// resourceCursor returns the next of a page that ended with resource r.
func resourceCursor(r locktable.ResourceInfo) string {
	if !r.Continues {
		return r.Name // what older servers gave, and older clients send
	}
	return r.Name + cursorSep + strconv.Itoa(r.First+len(r.Holders)+len(r.Converting)+len(r.Waiting))
}

// parseResourceCursor splits the after of a listing: a resource name, or a
// cursor given by resourceCursor.
func parseResourceCursor(after string) (name string, skip int, err error) {
	i := strings.LastIndex(after, cursorSep)
	if i < 0 {
		return after, 0, nil
	}
	skip, err = strconv.Atoi(after[i+1:])
	if err != nil || skip <= 0 {
		return "", 0, fmt.Errorf("%w: %q", ErrBadCursor, after)
	}
	return after[:i], skip, nil
}

// sessionCursor returns the next of a session page that ended with s.
func sessionCursor(s locktable.SessionInfo) string {
	id := strconv.FormatUint(uint64(s.ID), 10)
	if !s.Continues {
		return id
	}
	return id + ":" + strconv.Itoa(s.First+len(s.Locks))
}

// parseSessionCursor parses the after of a session listing: "" for the
// first page, or a cursor given by sessionCursor.
func parseSessionCursor(after string) (locktable.SessionID, int, error) {
	if after == "" {
		return 0, 0, nil
	}
	idText, skipText, cut := strings.Cut(after, ":")
	id, err := strconv.ParseUint(idText, 10, 64)
	skip := 0
	if err == nil && cut {
		skip, err = strconv.Atoi(skipText)
		if err == nil && skip <= 0 {
			err = ErrBadCursor
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadCursor, after)
	}
	return locktable.SessionID(id), skip, nil
}

// pageBounds returns the bounds of a page from those a request asked for:
// 0 or less for the defaults, at most the maxima.
func pageBounds(limit, locks int) (int, int) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	if locks <= 0 {
		locks = DefaultListLocks
	}
	return min(limit, MaxListLimit), min(locks, MaxListLocks)
}

// keepOf returns the filter on resource names of scope sc for the table's
// page queries (nil for every name), and false if sc covers no name.
func keepOf(sc listScope) (keep func(string) bool, ok bool) {
	switch {
	case sc.all():
		return nil, true
	case len(sc.prefixes) == 0:
		return nil, false
	}
	return sc.covers, true
}

// List lists resources in name order: see dlmpb.DLMServer. A page holds at
// most req.Limit resources and req.LockLimit locks (see the page
// constants); a resource with more locks than are left is cut and
// continued on the next page, from the cursor in Next. It reads this
// node's state once the requests it took before the call are applied,
// which on a follower may lag the leader's. With req.Exact, only the resource named req.Prefix is
// looked up, at the cost of one resource, not of the table. With
// authentication, it needs the list permission on some prefix
// (PermissionDenied otherwise) and lists only the resources it covers.
func (s *Server) List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error) {
	p := s.auth.Caller(ctx)
	if !p.Authenticated() {
		return nil, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	if !p.MayAny(auth.PermissionList) {
		s.auth.Deny(p, auth.PermissionList, req.GetPrefix())
		return nil, permissionDenied("identity " + p.Identity() + " may list nothing")
	}
	if err := protocol.ValidateList(req); err != nil { // the HTTP API calls List without the interceptor
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	after, skip, err := parseResourceCursor(req.GetAfter())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "list: after: "+err.Error())
	}
	if err := s.node.Settle(ctx); err != nil {
		return nil, proposeStatus(err)
	}
	resp := &dlmpb.ListResponse{}
	keep, ok := keepOf(scopeOf(p))
	if !ok {
		return resp, nil
	}
	limit, locks := pageBounds(int(req.GetLimit()), int(req.GetLockLimit()))
	q := locktable.ResourceQuery{Prefix: req.GetPrefix(), Exact: req.GetExact(), Keep: keep, After: after, Skip: skip, MaxResources: limit, MaxLocks: locks}
	s.node.FSM().Read(func(v fsm.View) {
		infos, more := v.Table().ResourcePage(q)
		if more {
			resp.Next = resourceCursor(infos[len(infos)-1])
		}
		src := s.source(v, time.Now(), false)
		resp.Resources = make([]*dlmpb.ResourceInfo, len(infos))
		for i, r := range infos {
			resp.Resources[i] = protocol.ResourceInfo(r, src)
		}
	})
	return resp, nil
}

// source returns what listings show beside the table of v: metadata,
// labels, sessions' records and, on the serving leader, their time left
// as of now (to the millisecond, at least 1ms); owners if owners is set.
// It is valid inside the Read that gave v.
func (s *Server) source(v fsm.View, now time.Time, owners bool) protocol.Source {
	return protocol.Source{
		Metadata: v.Metadata,
		Label:    v.Table().SessionLabel,
		Session:  v.Session,
		ExpiresIn: func(id locktable.SessionID) (time.Duration, bool) {
			d, ok := s.live.deadline(id)
			return max(d.Sub(now).Truncate(time.Millisecond), time.Millisecond), ok
		},
		Owners: owners,
	}
}

// Status describes the node and its state: see dlmpb.DLMServer. With
// authentication, it needs the list permission on some prefix.
func (s *Server) Status(ctx context.Context, _ *dlmpb.StatusRequest) (*dlmpb.StatusResponse, error) {
	p := s.auth.Caller(ctx)
	if !p.Authenticated() {
		return nil, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	if !p.MayAny(auth.PermissionList) {
		s.auth.Deny(p, auth.PermissionList, "")
		return nil, permissionDenied("identity " + p.Identity() + " has no list permission")
	}
	var st *dlmpb.StatusResponse
	s.node.FSM().Read(func(v fsm.View) { st = s.status(v) })
	return st, nil
}

// status describes the node and the state of v, now. The caller is inside
// the Read that gave v.
func (s *Server) status(v fsm.View) *dlmpb.StatusResponse {
	st := protocol.Status(v.Table().Stats())
	st.NodeId = s.node.ID()
	st.Ready = s.Ready()
	st.Leader = st.Ready
	st.RaftState = strings.ToLower(s.node.State().String())
	st.LeaderId, st.LeaderAddress = s.node.Leader()
	st.AppliedIndex = v.Applied()
	st.Now = timestamppb.Now()
	st.Build = protocol.Build(buildinfo.Read())
	return st
}

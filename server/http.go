package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/web"
)

// httpHandler serves:
//
//	GET /                           the dashboard (package web), which follows /v1/events
//	GET /healthz                    200 while the process serves HTTP
//	GET /readyz                     200 when the node takes requests, else 503
//	GET /metrics                    Prometheus metrics
//	GET /v1/resources?prefix=&after=&limit=&locks=   resources, holders and queues (JSON),
//	                                one page of List; "next" goes on
//	GET /v1/sessions?after=&limit=&locks=   open sessions with their locks (JSON), paged
//	                                like /v1/resources (see httpSessions)
//	GET /v1/status                  the node's status (JSON)
//	GET /v1/members                 the Raft configuration's servers and the leader (JSON)
//	GET /v1/events?prefix=&limit=   live snapshots as Server-Sent Events (see eventFeed);
//	                                at most MaxEventStreams at once, else 503 (AdminEventStreams
//	                                of them kept for admins), and MaxEventStreamsPerIdentity per
//	                                identity, else 429
//	GET /v1/whoami                  the caller's identity and permissions (JSON)
//	GET /v1/admin/sessions?owner=&after=&limit=   sessions with their owners (ListSessions, JSON)
//	POST /v1/admin/sessions/kill    end sessions: {"sessions": [id...]} or {"owner": "identity"} (KillSessions)
//	POST /v1/login, /v1/logout      a browser's login cookie (see httpLogin)
//	POST /v1/cluster/join, /v1/cluster/remove   membership changes
//
// With authentication on (see Config.Tokens), /healthz, /readyz, the
// dashboard's files and /v1/login, /v1/logout are open; /v1/whoami needs
// credentials; /metrics, /v1/status, /v1/resources, /v1/sessions and
// /v1/events need the list permission on some prefix (the last three show
// only what it covers); /v1/members, /v1/admin/... and the membership
// changes need admin.
//
// It also hooks the node's apply latency to the metrics, which only HTTP
// serves.
func (s *Server) httpHandler() http.Handler {
	s.metrics.instrument(s.node)
	mux := http.NewServeMux()
	mux.Handle("GET /", web.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "not ready: not the leader, or the log is not applied yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("POST /v1/login", s.httpLogin)
	mux.HandleFunc("POST /v1/logout", s.httpLogout)
	mux.Handle("GET /v1/whoami", s.require(0, http.HandlerFunc(s.httpWhoami)))
	mux.Handle("GET /metrics", s.require(auth.PermissionList, promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	mux.Handle("GET /v1/resources", s.require(auth.PermissionList, http.HandlerFunc(s.httpResources)))
	mux.Handle("GET /v1/sessions", s.require(auth.PermissionList, http.HandlerFunc(s.httpSessions)))
	mux.Handle("GET /v1/status", s.require(auth.PermissionList, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, _ := s.Status(r.Context(), nil)
		writeProto(w, st)
	})))
	mux.Handle("GET /v1/events", s.require(auth.PermissionList, newEventFeed(s)))
	mux.Handle("GET /v1/members", s.require(auth.PermissionAdmin, http.HandlerFunc(s.httpMembers)))
	mux.Handle("POST /v1/cluster/join", s.require(auth.PermissionAdmin, http.HandlerFunc(s.httpJoin)))
	mux.Handle("POST /v1/cluster/remove", s.require(auth.PermissionAdmin, http.HandlerFunc(s.httpRemove)))
	mux.Handle("GET /v1/admin/sessions", s.require(auth.PermissionAdmin, http.HandlerFunc(s.httpAdminSessions)))
	mux.Handle("POST /v1/admin/sessions/kill", s.require(auth.PermissionAdmin, http.HandlerFunc(s.httpKillSessions)))
	return mux
}

func (s *Server) httpMembers(w http.ResponseWriter, _ *http.Request) {
	members, err := s.node.Members()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	leaderID, leaderAddr := s.node.Leader()
	writeJSON(w, raftnode.MemberList{LeaderID: leaderID, LeaderAddress: leaderAddr, Members: members})
}

// httpResources serves one page of List: at most limit resources and
// locks locks (see the page constants), from after (the next of the page
// before).
func (s *Server) httpResources(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := validateListArgs(q.Get("prefix"), q.Get("after")); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	resp, err := s.List(r.Context(), &dlmpb.ListRequest{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: int32(limit), LockLimit: int32(locks)})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, resp)
}

// pageParams reads the limit and locks parameters of a listing (0 when
// absent), capped at MaxListLimit and MaxListLocks; it answers 400 and
// returns false if one is not a non-negative integer.
func pageParams(w http.ResponseWriter, q url.Values) (limit, locks int, ok bool) {
	for _, p := range []struct {
		name string
		v    *int
		max  int
	}{{"limit", &limit, MaxListLimit}, {"locks", &locks, MaxListLocks}} {
		text := q.Get(p.name)
		if text == "" {
			continue
		}
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("%s %q: want a non-negative integer", p.name, text), http.StatusBadRequest)
			return 0, 0, false
		}
		*p.v = min(n, p.max)
	}
	return limit, locks, true
}

// sessionJSON is one session in /v1/sessions.
type sessionJSON struct {
	ID       uint64    `json:"id"`
	Label    string    `json:"label"`
	TTL      string    `json:"ttl"`
	OpenedAt time.Time `json:"opened_at"`
	// ExpiresIn is the time left until the session expires without a
	// keepalive, as the leader sees it; absent on other nodes.
	ExpiresIn string     `json:"expires_in,omitempty"`
	Locks     []lockJSON `json:"locks"`
	// LocksTotal is the number of locks of the session the caller may
	// see; a page can hold only part of them, from position First on.
	LocksTotal int `json:"locks_total"`
	First      int `json:"first,omitempty"`
	// Continues says that the rest of the session's locks follow on the
	// next page.
	Continues bool `json:"continues,omitempty"`
}

// lockJSON is one lock or request of a session in /v1/sessions.
type lockJSON struct {
	ID        uint64 `json:"id"`
	Resource  string `json:"resource"`
	State     string `json:"state"`
	Mode      string `json:"mode,omitempty"`
	Requested string `json:"requested,omitempty"`
	Permits   uint32 `json:"permits,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Metadata  string `json:"metadata,omitempty"`
}

func lockJSONOf(l locktable.LockInfo, meta metaFunc) lockJSON {
	j := lockJSON{ID: uint64(l.ID), Resource: l.Resource, State: l.State.String(), Permits: l.Permits, Token: l.Token, Metadata: string(meta(l.ID))}
	if l.Mode.Valid() {
		j.Mode = l.Mode.String()
	}
	if l.Requested.Valid() {
		j.Requested = l.Requested.String()
	}
	return j
}

// httpSessions lists the open sessions and their locks, in id order; for a
// caller whose list permission does not cover every name, only the
// sessions that hold or await a resource it covers, each with those locks
// only. A page holds at most limit sessions and locks locks (see the page
// constants); a session with more locks than are left is cut and continued
// on the next page. The answer is {"sessions": [...], "next": cursor},
// next empty at the end; pass it as after for the next page.
func (s *Server) httpSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	after, skip, err := parseSessionCursor(q.Get("after"))
	if err != nil {
		http.Error(w, "after: "+err.Error(), http.StatusBadRequest)
		return
	}
	limit, locks = pageBounds(limit, locks)
	sc := scopeOf(s.auth.Caller(r.Context()))
	out := []sessionJSON{}
	next := ""
	s.node.FSM().Read(func(v fsm.View) {
		t := v.Table()
		page, more := s.visibleSessions(t, sc, locktable.SessionQuery{After: after, Skip: skip, MaxSessions: limit, MaxLocks: locks})
		if more {
			next = sessionCursor(page[len(page)-1])
		}
		for _, si := range page {
			sj := sessionJSON{ID: uint64(si.ID), Label: si.Label, OpenedAt: time.Unix(0, si.OpenedAt).UTC(), Locks: []lockJSON{},
				LocksTotal: si.LocksTotal, First: si.First, Continues: si.Continues}
			for _, l := range si.Locks {
				sj.Locks = append(sj.Locks, lockJSONOf(l, v.Metadata))
			}
			if rec, ok := v.Session(si.ID); ok {
				sj.TTL = rec.TTL.String()
			}
			if d, ok := s.live.deadline(si.ID); ok {
				sj.ExpiresIn = time.Until(d).Round(time.Millisecond).String()
			}
			out = append(out, sj)
		}
	})
	writeJSON(w, map[string]any{"sessions": out, "next": next})
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

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// writeProto writes m as JSON (protobuf field names, enums by name).
func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

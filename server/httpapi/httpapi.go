// Package httpapi serves a dlm server's HTTP API: health and readiness,
// Prometheus metrics, the JSON listings (resources, sessions, status,
// members), the live feed of the dashboard (Server-Sent Events), browser
// logins, session administration and membership changes, and the
// dashboard's page itself.
//
// It reads and changes the server only through Service, and authenticates
// and authorizes every request with the server's auth.Authenticator.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
	"github.com/dlmhq/dlm/server/raftnode"
	"github.com/dlmhq/dlm/web"
)

// Service is what the HTTP API needs of the server. The unary calls take
// the caller's principal from their context (auth.WithPrincipal), as the
// gRPC ones do.
type Service interface {
	// Ready reports whether the node takes requests.
	Ready() bool
	// NotReady says why the node does not take requests ("" when it does),
	// for /readyz: such as "the log cannot be written: no space left on
	// device".
	NotReady() string
	// List, Status, ListSessions and KillSessions are the gRPC calls of
	// the same names.
	List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error)
	Status(ctx context.Context, req *dlmpb.StatusRequest) (*dlmpb.StatusResponse, error)
	ListSessions(ctx context.Context, req *dlmpb.ListSessionsRequest) (*dlmpb.ListSessionsResponse, error)
	KillSessions(ctx context.Context, req *dlmpb.KillSessionsRequest) (*dlmpb.KillSessionsResponse, error)
	// Sessions returns one page of the open sessions p may see, with
	// their locks; after is the Next of the page before ("" first). An
	// after that does not parse is an error wrapping ErrBadRequest.
	Sessions(p auth.Principal, after string, limit, locks int) (*dlmpb.SessionPage, error)
	// Snapshot returns the live feed's view for p of the node and of the
	// resources whose names begin with prefix, at most limit of them (0:
	// the default). A prefix no name could have is an error wrapping
	// ErrBadRequest.
	Snapshot(p auth.Principal, prefix string, limit int) (*dlmpb.EventSnapshot, error)
	// CopyState returns an online copy of the replicated state (see
	// raftnode.Node.Copy).
	CopyState(ctx context.Context) (raftnode.SnapshotFile, error)
	// Applied returns the Raft index of the last entry applied.
	Applied() uint64
	// Leadership reports whether the node leads, and a channel closed at
	// its next change.
	Leadership() (leader bool, changed <-chan struct{})
	// Members returns the Raft configuration and the leader.
	Members() (*dlmpb.MemberList, error)
	// AddMember adds a voter (see cluster.Join); RemoveMember removes a
	// server. On a node that does not lead they fail with an error
	// matching raftnode.ErrNotLeader.
	AddMember(ctx context.Context, req cluster.JoinRequest) error
	RemoveMember(ctx context.Context, id string) error
	// LeaderHTTP returns the HTTP address of the leader, if it is another
	// node and its address is known.
	LeaderHTTP() (string, bool)
}

// Config configures the API.
type Config struct {
	// Service is the server served.
	Service Service
	// Auth authenticates and authorizes requests.
	Auth *auth.Authenticator
	// Metrics serves GET /metrics.
	Metrics http.Handler
	// EventStreams, if not nil, counts the live feed's open streams.
	EventStreams prometheus.Gauge
	// MaxEventStreamsPerIdentity bounds the feed's streams of one
	// authenticated identity; default DefaultMaxEventStreamsPerIdentity.
	MaxEventStreamsPerIdentity int
	// Logger receives what the API logs; nil discards it.
	Logger *slog.Logger
	// Done closes when the server closes: the feed's streams end.
	Done <-chan struct{}
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/,
	// to the admin permission when authentication is on.
	Pprof bool
	// Handlers are more routes, by ServeMux pattern, that authenticate
	// and authorize their requests themselves: the unary lock API.
	Handlers map[string]http.Handler
}

// api is the HTTP API of one server.
type api struct {
	svc  Service
	auth *auth.Authenticator
	log  *slog.Logger
	feed *eventFeed
}

// New returns the handler of the API:
//
//	GET /                           the dashboard (package web), which follows /v1/events
//	GET /healthz                    200 while the process serves HTTP
//	GET /readyz                     200 when the node takes requests, else 503
//	GET /metrics                    Prometheus metrics
//	GET /v1/resources?prefix=&after=&limit=&locks=   resources, holders and queues (JSON),
//	                                one page of List (a ListResponse); "next" goes on
//	GET /v1/sessions?after=&limit=&locks=   open sessions with their locks (JSON, a
//	                                SessionPage), paged like /v1/resources
//	GET /v1/status                  the node's status (JSON, a StatusResponse)
//	GET /v1/members                 the Raft configuration's servers and the leader (JSON, a MemberList)
//	GET /v1/events?prefix=&limit=   live snapshots (EventSnapshot) as Server-Sent Events (see eventFeed);
//	                                at most MaxEventStreams at once, else 503 (AdminEventStreams
//	                                of them kept for admins), and MaxEventStreamsPerIdentity per
//	                                identity, else 429
//	GET /v1/whoami                  the caller's identity and permissions (JSON)
//	GET /v1/admin/sessions?owner=&after=&limit=   sessions with their owners (ListSessions, JSON)
//	GET /v1/admin/snapshot          an online copy of the replicated state: a snapshot file
//	                                (raftnode.SnapshotFile), as `dlm snapshot save` writes it
//
// Every JSON listing is a message of api/dlm.proto in protobuf's JSON
// mapping (see marshalJSON).
//
//	POST /v1/admin/sessions/kill    end sessions: {"sessions": [id...]} or {"owner": "identity"} (KillSessions)
//	POST /v1/login, /v1/logout      a browser's login cookie (see login)
//	POST /v1/cluster/join, /v1/cluster/remove   membership changes (package cluster)
//	GET /debug/pprof/...            Go's profiles (net/http/pprof), only with Config.Pprof
//
// With authentication on, /healthz, /readyz, the dashboard's files and
// /v1/login, /v1/logout are open; /v1/whoami needs credentials; /metrics,
// /v1/status, /v1/resources, /v1/sessions and /v1/events need the list
// permission on some prefix (the last three show only what it covers);
// /v1/members, /v1/admin/..., /debug/pprof/ and the membership changes
// need admin.
func New(cfg Config) http.Handler {
	a := &api{svc: cfg.Service, auth: cfg.Auth, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.feed = newEventFeed(a, cfg)
	mux := http.NewServeMux()
	mux.Handle("GET /", web.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.svc.Ready() {
			why := a.svc.NotReady()
			if why == "" {
				why = "not the leader, or the log is not applied yet"
			}
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("POST /v1/login", a.login)
	mux.HandleFunc("POST /v1/logout", a.logout)
	mux.Handle("GET /v1/whoami", a.require(0, http.HandlerFunc(a.whoami)))
	mux.Handle("GET /metrics", a.require(auth.PermissionList, cfg.Metrics))
	mux.Handle("GET /v1/resources", a.require(auth.PermissionList, http.HandlerFunc(a.resources)))
	mux.Handle("GET /v1/sessions", a.require(auth.PermissionList, http.HandlerFunc(a.sessions)))
	mux.Handle("GET /v1/status", a.require(auth.PermissionList, http.HandlerFunc(a.status)))
	mux.Handle("GET /v1/events", a.require(auth.PermissionList, a.feed))
	mux.Handle("GET /v1/members", a.require(auth.PermissionAdmin, http.HandlerFunc(a.members)))
	mux.Handle("POST /v1/cluster/join", a.require(auth.PermissionAdmin, http.HandlerFunc(a.join)))
	mux.Handle("POST /v1/cluster/remove", a.require(auth.PermissionAdmin, http.HandlerFunc(a.remove)))
	mux.Handle("GET /v1/admin/sessions", a.require(auth.PermissionAdmin, http.HandlerFunc(a.adminSessions)))
	mux.Handle("POST /v1/admin/sessions/kill", a.require(auth.PermissionAdmin, http.HandlerFunc(a.killSessions)))
	mux.Handle("GET /v1/admin/snapshot", a.require(auth.PermissionAdmin, http.HandlerFunc(a.snapshot)))
	for pattern, h := range cfg.Handlers {
		mux.Handle(pattern, h)
	}
	if cfg.Pprof {
		mux.Handle("GET /debug/pprof/", a.require(auth.PermissionAdmin, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/profile", a.require(auth.PermissionAdmin, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/trace", a.require(auth.PermissionAdmin, http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

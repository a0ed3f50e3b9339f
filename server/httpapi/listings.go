package httpapi

import (
	"net/http"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// resources serves one page of List: at most limit resources and locks
// locks, from after (the next of the page before).
func (a *api) resources(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	resp, err := a.svc.List(r.Context(), &dlmpb.ListRequest{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: int32(limit), LockLimit: int32(locks)})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, resp)
}

// sessions lists the open sessions and their locks, in id order; for a
// caller whose list permission does not cover every name, only the
// sessions that hold or await a resource it covers, each with those locks
// only (see Service.Sessions). The answer is {"sessions": [...], "next":
// cursor}, next empty at the end; pass it as after for the next page.
func (a *api) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, locks, ok := pageParams(w, q)
	if !ok {
		return
	}
	page, err := a.svc.Sessions(a.auth.Caller(r.Context()), q.Get("after"), limit, locks)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, page)
}

// status serves the node's Status as JSON.
func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st, err := a.svc.Status(r.Context(), &dlmpb.StatusRequest{})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, st)
}

// Session is one session in /v1/sessions.
type Session struct {
	// ID, Label, TTL and OpenedAt describe the session.
	ID       uint64    `json:"id"`
	Label    string    `json:"label"`
	TTL      string    `json:"ttl"`
	OpenedAt time.Time `json:"opened_at"`
	// ExpiresIn is the time left until the session expires without a
	// keepalive, as the leader sees it; absent on other nodes.
	ExpiresIn string `json:"expires_in,omitempty"`
	Locks     []Lock `json:"locks"`
	// LocksTotal is the number of locks of the session the caller may
	// see; a page can hold only part of them, from position First on.
	LocksTotal int `json:"locks_total"`
	First      int `json:"first,omitempty"`
	// Continues says that the rest of the session's locks follow on the
	// next page.
	Continues bool `json:"continues,omitempty"`
}

// Lock is one lock or request of a session in /v1/sessions.
type Lock struct {
	// ID, Resource, State, Mode (granted), Requested (pending), Permits,
	// Token and Metadata describe the lock or request.
	ID        uint64 `json:"id"`
	Resource  string `json:"resource"`
	State     string `json:"state"`
	Mode      string `json:"mode,omitempty"`
	Requested string `json:"requested,omitempty"`
	Permits   uint32 `json:"permits,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Metadata  string `json:"metadata,omitempty"`
}

// SessionPage is the answer of GET /v1/sessions.
type SessionPage struct {
	Sessions []Session `json:"sessions"`
	// Next is the cursor of the next page: empty at the end.
	Next string `json:"next"`
}

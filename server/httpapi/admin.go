package httpapi

import (
	"math"
	"net/http"
	"strconv"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// adminSessions serves GET /v1/admin/sessions?owner=&after=&limit=:
// ListSessions as JSON.
func (a *api) adminSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req dlmpb.ListSessionsRequest
	req.Owner = q.Get("owner")
	if v := q.Get("after"); v != "" {
		after, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "after: want a session id, got "+strconv.Quote(v), http.StatusBadRequest)
			return
		}
		req.After = after
	}
	if v := q.Get("limit"); v != "" {
		limit, err := strconv.Atoi(v)
		if err != nil || limit < 0 {
			http.Error(w, "limit: want a non-negative integer, got "+strconv.Quote(v), http.StatusBadRequest)
			return
		}
		req.Limit = int32(min(limit, math.MaxInt32))
	}
	resp, err := a.svc.ListSessions(r.Context(), &req)
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, resp)
}

// killRequest is the body of POST /v1/admin/sessions/kill.
type killRequest struct {
	Sessions []uint64 `json:"sessions"`
	Owner    string   `json:"owner"`
}

// killSessions serves POST /v1/admin/sessions/kill with a JSON body
// {"sessions": [id, ...]} or {"owner": "identity"}: KillSessions.
func (a *api) killSessions(w http.ResponseWriter, r *http.Request) {
	var req killRequest
	if !readJSON(w, r, &req) {
		return
	}
	resp, err := a.svc.KillSessions(r.Context(), &dlmpb.KillSessionsRequest{Sessions: req.Sessions, Owner: req.Owner})
	if err != nil {
		writeStatusError(w, err)
		return
	}
	writeProto(w, resp)
}

package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/dlmhq/dlm/server/raftnode"

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

// SnapshotIndexHeader names, in the answer of GET /v1/admin/snapshot, the
// Raft index of the last entry the copy includes.
const SnapshotIndexHeader = "Dlm-Snapshot-Index"

// snapshot serves GET /v1/admin/snapshot: an online copy of the replicated
// state as a snapshot file (application/octet-stream), 503 before the node
// applied an entry.
func (a *api) snapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := a.svc.CopyState(r.Context())
	switch {
	case errors.Is(err, raftnode.ErrNothingApplied):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="dlm.snap"`)
	h.Set(SnapshotIndexHeader, strconv.FormatUint(snap.Index, 10))
	h.Set("Content-Length", strconv.FormatInt(snap.Size(), 10))
	if _, err := snap.WriteTo(w); err != nil {
		a.log.Info("dlm server: snapshot not delivered", "err", err)
	}
}

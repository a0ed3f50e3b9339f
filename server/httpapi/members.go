package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/dlmhq/dlm/server/cluster"

	"github.com/dlmhq/dlm/server/raftnode"
)

// members serves the Raft configuration and the leader.
func (a *api) members(w http.ResponseWriter, _ *http.Request) {
	list, err := a.svc.Members()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeProto(w, list)
}

// join adds the caller to the cluster as a voter.
func (a *api) join(w http.ResponseWriter, r *http.Request) {
	var req cluster.JoinRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" || len(req.ID) > 256 || req.RaftAddr == "" {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "want {\"id\": ..., \"raft_addr\": \"host:port\"}"})
		return
	}
	a.membership(w, r, func(ctx context.Context) error { return a.svc.AddMember(ctx, req) })
}

// remove removes a server from the cluster.
func (a *api) remove(w http.ResponseWriter, r *http.Request) {
	var req cluster.RemoveRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "want {\"id\": ...}"})
		return
	}
	a.membership(w, r, func(ctx context.Context) error { return a.svc.RemoveMember(ctx, req.ID) })
}

// membership runs a membership change on the leader, or names the leader.
func (a *api) membership(w http.ResponseWriter, r *http.Request, change func(context.Context) error) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := change(ctx)
	switch {
	case err == nil:
		writeCluster(w, http.StatusOK, cluster.Reply{OK: true})
	case errors.Is(err, raftnode.ErrNotLeader):
		rep := cluster.Reply{Error: "this node is not the leader"}
		if h, ok := a.svc.LeaderHTTP(); ok && h != "" {
			rep.Leader = h
			w.Header().Set(cluster.LeaderHeader, h)
		}
		writeCluster(w, http.StatusServiceUnavailable, rep)
	case errors.Is(err, ErrBadRequest):
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: err.Error()})
	default:
		writeCluster(w, http.StatusInternalServerError, cluster.Reply{Error: err.Error()})
	}
}

// readJSON decodes the JSON body of a membership call into v, or answers
// 400.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "bad JSON body: " + err.Error()})
		return false
	}
	return true
}

// writeCluster answers a membership call.
func writeCluster(w http.ResponseWriter, code int, rep cluster.Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(rep)
}

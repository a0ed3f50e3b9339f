package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/server/cluster"
)

// LeaderHeader is the gRPC trailer (and HTTP header) in which a node that
// is not the leader names the leader's client address; empty when it knows
// none.
const LeaderHeader = "dlm-leader"

// leaderAddrs returns the client and HTTP addresses of the node this one
// takes for the leader, if it is another node whose addresses are known.
func (s *Server) leaderAddrs() (client, http string, ok bool) {
	id, _ := s.node.Leader()
	if id == "" || id == s.node.ID() {
		return "", "", false
	}
	return s.node.FSM().MemberAddrs(id)
}

// notLeader is the error of a stream opened on a node that does not serve
// (a follower, or a leader not ready yet); it names the leader in the
// stream's trailer when it is known.
func (s *Server) notLeader(stream grpc.ServerStream) error {
	msg := "dlm server: this node is not the leader, or not ready yet"
	client, _, ok := s.leaderAddrs()
	if ok {
		msg += "; the leader serves at " + client
	}
	// Present even when empty: it tells the client that a dlm node
	// answered, and that it may wait for an election to end.
	stream.SetTrailer(metadata.Pairs(LeaderHeader, client))
	return status.Error(codes.Unavailable, msg)
}

// httpJoin adds the caller to the cluster as a voter.
func (s *Server) httpJoin(w http.ResponseWriter, r *http.Request) {
	var req cluster.JoinRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" || len(req.ID) > 256 || req.RaftAddr == "" {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "want {\"id\": ..., \"raft_addr\": \"host:port\"}"})
		return
	}
	if s.node.Secure() && s.node.IsLeader() {
		// Over TLS, a node the leader cannot authenticate (or that cannot
		// authenticate the leader) would join and never replicate: refuse
		// it now, with the reason.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		err := s.node.Probe(ctx, req.RaftAddr)
		cancel()
		if err != nil {
			s.log.Warn("dlm server: join refused: the new node's Raft address fails the TLS handshake", "id", req.ID, "raft_addr", req.RaftAddr, "err", err)
			writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: fmt.Sprintf("the leader cannot reach %s over Raft TLS: %v", req.RaftAddr, err)})
			return
		}
	}
	s.membership(w, r, func(ctx context.Context) error { return s.node.AddVoter(ctx, req.ID, req.RaftAddr) })
}

// httpRemove removes a server from the cluster.
func (s *Server) httpRemove(w http.ResponseWriter, r *http.Request) {
	var req cluster.RemoveRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "want {\"id\": ...}"})
		return
	}
	s.membership(w, r, func(ctx context.Context) error { return s.node.RemoveServer(ctx, req.ID) })
}

// membership runs a membership change on the leader, or names the leader.
func (s *Server) membership(w http.ResponseWriter, r *http.Request, change func(context.Context) error) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := change(ctx)
	switch {
	case err == nil:
		writeCluster(w, http.StatusOK, cluster.Reply{OK: true})
	case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost):
		rep := cluster.Reply{Error: "this node is not the leader"}
		if _, h, ok := s.leaderAddrs(); ok && h != "" {
			rep.Leader = h
			w.Header().Set(LeaderHeader, h)
		}
		writeCluster(w, http.StatusServiceUnavailable, rep)
	default:
		writeCluster(w, http.StatusInternalServerError, cluster.Reply{Error: err.Error()})
	}
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeCluster(w, http.StatusBadRequest, cluster.Reply{Error: "bad JSON body: " + err.Error()})
		return false
	}
	return true
}

func writeCluster(w http.ResponseWriter, code int, rep cluster.Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(rep)
}

// Join asks a running cluster to add this server's node as a voter,
// through the HTTP address of any member (see cluster.Join; its failed
// attempts go to the server's logger). The node must have been opened with
// raftnode.Config.Join (or be restarting with its own Raft state, when
// joining again is harmless).
func (s *Server) Join(ctx context.Context, members string, opts ...cluster.Option) error {
	opts = append([]cluster.Option{cluster.WithLogger(s.log)}, opts...)
	return cluster.Join(ctx, members, s.node.ID(), s.node.Addr(), opts...)
}

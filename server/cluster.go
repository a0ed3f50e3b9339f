package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// LeaderHeader is the gRPC trailer (and HTTP header) in which a node that
// is not the leader names the leader's client address; empty when it knows
// none.
const LeaderHeader = "dlm-leader"

// joinRequest is the body of POST /v1/cluster/join.
type joinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
}

// removeRequest is the body of POST /v1/cluster/remove.
type removeRequest struct {
	ID string `json:"id"`
}

// clusterReply is the answer of the membership calls.
type clusterReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Leader is the leader's HTTP address, when the call reached another
	// node: send it there.
	Leader string `json:"leader,omitempty"`
}

// leaderAddrs returns the client and HTTP addresses of the node this one
// takes for the leader, if it is another node whose addresses are known.
func (s *Server) leaderAddrs() (client, http string, ok bool) {
	id, _ := s.node.Leader()
	if id == "" || id == s.node.cfg.ID {
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
	var req joinRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" || len(req.ID) > 256 || req.RaftAddr == "" {
		writeCluster(w, http.StatusBadRequest, clusterReply{Error: "want {\"id\": ..., \"raft_addr\": \"host:port\"}"})
		return
	}
	s.membership(w, r, func(ctx context.Context) error { return s.node.AddVoter(ctx, req.ID, req.RaftAddr) })
}

// httpRemove removes a server from the cluster.
func (s *Server) httpRemove(w http.ResponseWriter, r *http.Request) {
	var req removeRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" {
		writeCluster(w, http.StatusBadRequest, clusterReply{Error: "want {\"id\": ...}"})
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
		writeCluster(w, http.StatusOK, clusterReply{OK: true})
	case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost):
		rep := clusterReply{Error: "this node is not the leader"}
		if _, h, ok := s.leaderAddrs(); ok && h != "" {
			rep.Leader = h
			w.Header().Set(LeaderHeader, h)
		}
		writeCluster(w, http.StatusServiceUnavailable, rep)
	default:
		writeCluster(w, http.StatusInternalServerError, clusterReply{Error: err.Error()})
	}
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeCluster(w, http.StatusBadRequest, clusterReply{Error: "bad JSON body: " + err.Error()})
		return false
	}
	return true
}

func writeCluster(w http.ResponseWriter, code int, rep clusterReply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(rep)
}

// Join asks a running cluster to add this server's node as a voter,
// through the HTTP address of any member (comma-separated, tried in turn,
// following the leader a member names), until it succeeds or ctx ends. The
// node must have been opened with Config.Join (or be restarting with its
// own Raft state, when joining again is harmless).
func (s *Server) Join(ctx context.Context, members string) error {
	body, _ := json.Marshal(joinRequest{ID: s.node.cfg.ID, RaftAddr: s.node.Addr()})
	return postMembership(ctx, members, "/v1/cluster/join", body, s.log.Info)
}

// RemoveMember asks a running cluster, through the HTTP address of any
// member (comma-separated), to remove the server id.
func RemoveMember(ctx context.Context, members, id string) error {
	body, _ := json.Marshal(removeRequest{ID: id})
	return postMembership(ctx, members, "/v1/cluster/remove", body, func(string, ...any) {})
}

// postMembership posts body to path on the members in turn, following the
// leader they name, retrying with a pause until one succeeds or ctx ends.
func postMembership(ctx context.Context, members, path string, body []byte, logf func(string, ...any)) error {
	addrs := strings.Split(members, ",")
	client := &http.Client{Timeout: 35 * time.Second}
	var last error
	for attempt := 0; ; attempt++ {
		addr := strings.TrimSpace(addrs[attempt%len(addrs)])
		for hops := 0; hops < 3 && addr != ""; hops++ {
			var rep clusterReply
			rep, last = postOnce(ctx, client, "http://"+addr+path, body)
			if last == nil {
				return nil
			}
			logf("dlm server: membership call failed", "member", addr, "err", last)
			addr = rep.Leader
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dlm server: %s: %w (last error: %v)", path, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func postOnce(ctx context.Context, client *http.Client, url string, body []byte) (clusterReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return clusterReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return clusterReply{}, err
	}
	defer resp.Body.Close()
	var rep clusterReply
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(data, &rep); err != nil {
		return rep, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
	}
	if !rep.OK {
		return rep, fmt.Errorf("%s: %s", resp.Status, rep.Error)
	}
	return rep, nil
}

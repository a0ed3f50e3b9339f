package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/dlmhq/dlm/server/raftnode"

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
	var req joinRequest
	if !readJSON(w, r, &req) {
		return
	}
	if req.ID == "" || len(req.ID) > 256 || req.RaftAddr == "" {
		writeCluster(w, http.StatusBadRequest, clusterReply{Error: "want {\"id\": ..., \"raft_addr\": \"host:port\"}"})
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
			writeCluster(w, http.StatusBadRequest, clusterReply{Error: fmt.Sprintf("the leader cannot reach %s over Raft TLS: %v", req.RaftAddr, err)})
			return
		}
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

// AdminOption configures the membership calls: Server.Join, RemoveMember
// and ClusterMembers.
type AdminOption func(*adminOptions)

type adminOptions struct {
	tls   *tls.Config
	token string
}

// WithAdminTLS makes the membership calls over HTTPS, verifying the
// members' certificates with cfg (and presenting cfg's client certificate,
// if it has one).
func WithAdminTLS(cfg *tls.Config) AdminOption { return func(o *adminOptions) { o.tls = cfg } }

// WithAdminToken sends token as the calls' bearer token. It is only sent
// over TLS: without WithAdminTLS the calls fail at once.
func WithAdminToken(token string) AdminOption { return func(o *adminOptions) { o.token = token } }

// Join asks a running cluster to add this server's node as a voter,
// through the HTTP address of any member (comma-separated, tried in turn,
// following the leader a member names), until it succeeds, ctx ends, or
// the cluster refuses the call for good (bad credentials: ErrUnauthenticated
// or ErrPermissionDenied; a node the leader cannot reach over Raft TLS).
// The node must have been opened with Config.Join (or be restarting with
// its own Raft state, when joining again is harmless). With
// authentication, the call needs the admin permission.
func (s *Server) Join(ctx context.Context, members string, opts ...AdminOption) error {
	body, _ := json.Marshal(joinRequest{ID: s.node.ID(), RaftAddr: s.node.Addr()})
	return postMembership(ctx, members, "/v1/cluster/join", body, s.log.Info, opts)
}

// RemoveMember asks a running cluster, through the HTTP address of any
// member (comma-separated), to remove the server id. With authentication,
// the call needs the admin permission.
func RemoveMember(ctx context.Context, members, id string, opts ...AdminOption) error {
	body, _ := json.Marshal(removeRequest{ID: id})
	return postMembership(ctx, members, "/v1/cluster/remove", body, func(string, ...any) {}, opts)
}

// ClusterMembers returns the members of a cluster as the first of members
// (HTTP addresses, comma-separated) that answers sees them. With
// authentication, the call needs the admin permission.
func ClusterMembers(ctx context.Context, members string, opts ...AdminOption) (*raftnode.MemberList, error) {
	client, scheme, o, err := adminClient(opts)
	if err != nil {
		return nil, err
	}
	var last error
	for _, addr := range strings.Split(members, ",") {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+strings.TrimSpace(addr)+"/v1/members", nil)
		if err != nil {
			return nil, err
		}
		o.authorize(req)
		var list raftnode.MemberList
		if last = doJSON(client, req, &list); last == nil {
			return &list, nil
		}
		if permanent(last) {
			break
		}
	}
	return nil, fmt.Errorf("dlm server: members: %w", last)
}

// adminClient returns the HTTP client and URL scheme of the calls.
func adminClient(opts []AdminOption) (*http.Client, string, adminOptions, error) {
	var o adminOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.tls == nil {
		if o.token != "" {
			return nil, "", o, errors.New("dlm server: a token is only sent over TLS: give the members' CA (WithAdminTLS)")
		}
		return &http.Client{Timeout: 35 * time.Second}, "http://", o, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.tls.Clone()
	return &http.Client{Timeout: 35 * time.Second, Transport: tr}, "https://", o, nil
}

// authorize adds the token to req.
func (o adminOptions) authorize(req *http.Request) {
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
}

// postMembership posts body to path on the members in turn, following the
// leader they name, retrying with a pause until one succeeds, ctx ends or
// the call is refused for good (see permanent).
func postMembership(ctx context.Context, members, path string, body []byte, logf func(string, ...any), opts []AdminOption) error {
	client, scheme, o, err := adminClient(opts)
	if err != nil {
		return err
	}
	addrs := strings.Split(members, ",")
	var last error
	for attempt := 0; ; attempt++ {
		addr := strings.TrimSpace(addrs[attempt%len(addrs)])
		for hops := 0; hops < 3 && addr != ""; hops++ {
			var rep clusterReply
			rep, last = postOnce(ctx, client, scheme+addr+path, body, o)
			if last == nil {
				return nil
			}
			if ctx.Err() != nil { // stopped, not refused: the caller says so
				return fmt.Errorf("dlm server: %s: %w (last error: %v)", path, ctx.Err(), last)
			}
			logf("dlm server: membership call failed", "member", addr, "err", last)
			if permanent(last) {
				return fmt.Errorf("dlm server: %s: %w", path, last)
			}
			addr = rep.Leader
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dlm server: %s: %w (last error: %v)", path, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func postOnce(ctx context.Context, client *http.Client, url string, body []byte, o adminOptions) (clusterReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return clusterReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	o.authorize(req)
	var rep clusterReply
	err = doJSON(client, req, &rep)
	if err == nil && !rep.OK {
		err = fmt.Errorf("%s", rep.Error)
	}
	return rep, err
}

// httpStatusError is an HTTP answer other than 200.
type httpStatusError struct {
	code int
	msg  string
}

// Error says the status and the answer's message.
func (e *httpStatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.msg)
}

// Unwrap matches ErrUnauthenticated for 401 and ErrPermissionDenied for 403.
func (e *httpStatusError) Unwrap() error {
	switch e.code {
	case http.StatusUnauthorized:
		return ErrUnauthenticated
	case http.StatusForbidden:
		return ErrPermissionDenied
	}
	return nil
}

// permanent reports whether a membership call's error will not go away by
// retrying: a refusal of the request or of its credentials (400, 401, 403,
// 404).
func permanent(err error) bool {
	var he *httpStatusError
	if !errors.As(err, &he) {
		return false
	}
	switch he.code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// doJSON runs req and decodes a JSON answer into v: on a status other than
// 200 it returns an *httpStatusError (v still decoded if the body is JSON).
func doJSON(client *http.Client, req *http.Request, v any) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	jerr := json.Unmarshal(data, v)
	if resp.StatusCode != http.StatusOK {
		msg := string(bytes.TrimSpace(data))
		if rep, ok := v.(*clusterReply); ok && jerr == nil && rep.Error != "" {
			msg = rep.Error
		}
		return &httpStatusError{code: resp.StatusCode, msg: msg}
	}
	if jerr != nil {
		return fmt.Errorf("%s: bad JSON answer: %w", req.URL.Redacted(), jerr)
	}
	return nil
}

// Package cluster is the client of a dlm cluster's membership API (HTTP):
// Join, Remove and Members, as `dlm server -join` and `dlm cluster` use
// them, and the messages the server's handlers read and write; and of its
// online snapshot (Snapshot), as `dlm snapshot save` uses it.
package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/raftnode"
)

// LeaderHeader is the gRPC trailer (and HTTP header) in which a node that
// is not the leader names the leader's address (client address in gRPC,
// HTTP address in a membership call's answer); empty when it knows none.
const LeaderHeader = "dlm-leader"

// JoinRequest is the body of POST /v1/cluster/join.
type JoinRequest struct {
	// ID and RaftAddr are the joining node's Raft id and address.
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
}

// RemoveRequest is the body of POST /v1/cluster/remove.
type RemoveRequest struct {
	// ID is the Raft id of the server to remove.
	ID string `json:"id"`
}

// Reply is the answer of the membership calls.
type Reply struct {
	// OK says the change was made; Error says why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Leader is the leader's HTTP address, when the call reached another
	// node: send it there.
	Leader string `json:"leader,omitempty"`
}

// Option configures the membership calls.
type Option func(*options)

type options struct {
	tls   *tls.Config
	token string
	log   *slog.Logger
}

// WithTLS makes the membership calls over HTTPS, verifying the
// members' certificates with cfg (and presenting cfg's client certificate,
// if it has one).
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithToken sends token as the calls' bearer token. It is only sent
// over TLS: without WithTLS the calls fail at once.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithLogger logs each failed attempt of Join (nil: none are logged).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Join asks a running cluster to add the node id, at Raft address raftAddr,
// as a voter, through the HTTP address of any member (comma-separated,
// tried in turn, following the leader a member names), until it succeeds,
// ctx ends, or the cluster refuses the call for good (bad credentials:
// auth.ErrUnauthenticated or auth.ErrPermissionDenied; a node the leader
// cannot reach over Raft TLS). Each failed attempt is logged at Info on
// the logger of WithLogger. With authentication, the call needs the admin
// permission.
func Join(ctx context.Context, members, id, raftAddr string, opts ...Option) error {
	body, _ := json.Marshal(JoinRequest{ID: id, RaftAddr: raftAddr})
	return postMembership(ctx, members, "/v1/cluster/join", body, opts)
}

// Remove asks a running cluster, through the HTTP address of any member
// (comma-separated), to remove the server id. With authentication, the call
// needs the admin permission.
func Remove(ctx context.Context, members, id string, opts ...Option) error {
	body, _ := json.Marshal(RemoveRequest{ID: id})
	return postMembership(ctx, members, "/v1/cluster/remove", body, opts)
}

// Members returns the members of a cluster as the first of members (HTTP
// addresses, comma-separated) that answers sees them. With authentication,
// the call needs the admin permission.
func Members(ctx context.Context, members string, opts ...Option) (*dlmpb.MemberList, error) {
	client, scheme, o, err := newClient(opts)
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
		list := new(dlmpb.MemberList)
		if last = doJSON(client, req, list); last == nil {
			return list, nil
		}
		if permanent(last) {
			break
		}
	}
	return nil, fmt.Errorf("dlm server: members: %w", last)
}

// Snapshot returns an online copy of a cluster's replicated state (GET
// /v1/admin/snapshot), from the first of members (HTTP addresses,
// comma-separated) that serves one, checked whole (its checksum). It is the
// state as of the last entry that member applied: name the leader for the
// newest. With authentication, the call needs the admin permission.
func Snapshot(ctx context.Context, members string, opts ...Option) (raftnode.SnapshotFile, error) {
	client, scheme, o, err := newClient(opts)
	if err != nil {
		return raftnode.SnapshotFile{}, err
	}
	client.Timeout = 0 // a large state may take long: ctx bounds the call
	var last error
	for _, addr := range strings.Split(members, ",") {
		var snap raftnode.SnapshotFile
		if snap, last = snapshotOnce(ctx, client, scheme+strings.TrimSpace(addr)+"/v1/admin/snapshot", o); last == nil {
			return snap, nil
		}
		if permanent(last) || ctx.Err() != nil {
			break
		}
	}
	return raftnode.SnapshotFile{}, fmt.Errorf("dlm server: snapshot: %w", last)
}

func snapshotOnce(ctx context.Context, client *http.Client, url string, o options) (raftnode.SnapshotFile, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return raftnode.SnapshotFile{}, err
	}
	o.authorize(req)
	resp, err := client.Do(req)
	if err != nil {
		return raftnode.SnapshotFile{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return raftnode.SnapshotFile{}, &httpStatusError{code: resp.StatusCode, msg: string(bytes.TrimSpace(data))}
	}
	return raftnode.ReadSnapshotFile(resp.Body)
}

// newClient returns the HTTP client and URL scheme of the calls.
func newClient(opts []Option) (*http.Client, string, options, error) {
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.tls == nil {
		if o.token != "" {
			return nil, "", o, errors.New("dlm server: a token is only sent over TLS: give the members' CA (WithTLS)")
		}
		return &http.Client{Timeout: 35 * time.Second}, "http://", o, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.tls.Clone()
	return &http.Client{Timeout: 35 * time.Second, Transport: tr}, "https://", o, nil
}

// authorize adds the token to req.
func (o options) authorize(req *http.Request) {
	if o.token != "" {
		req.Header.Set("Authorization", "Bearer "+o.token)
	}
}

// postMembership posts body to path on the members in turn, following the
// leader they name, retrying with a pause until one succeeds, ctx ends or
// the call is refused for good (see permanent).
func postMembership(ctx context.Context, members, path string, body []byte, opts []Option) error {
	client, scheme, o, err := newClient(opts)
	if err != nil {
		return err
	}
	addrs := strings.Split(members, ",")
	var last error
	for attempt := 0; ; attempt++ {
		addr := strings.TrimSpace(addrs[attempt%len(addrs)])
		for hops := 0; hops < 3 && addr != ""; hops++ {
			var rep Reply
			rep, last = postOnce(ctx, client, scheme+addr+path, body, o)
			if last == nil {
				return nil
			}
			if ctx.Err() != nil { // stopped, not refused: the caller says so
				return fmt.Errorf("dlm server: %s: %w (last error: %v)", path, ctx.Err(), last)
			}
			o.log.Info("dlm server: membership call failed", "member", addr, "err", last)
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

func postOnce(ctx context.Context, client *http.Client, url string, body []byte, o options) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	o.authorize(req)
	var rep Reply
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

// Unwrap matches auth.ErrUnauthenticated for 401 and auth.ErrPermissionDenied for 403.
func (e *httpStatusError) Unwrap() error {
	switch e.code {
	case http.StatusUnauthorized:
		return auth.ErrUnauthenticated
	case http.StatusForbidden:
		return auth.ErrPermissionDenied
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
	var jerr error
	if m, ok := v.(proto.Message); ok { // an answer of the JSON listings
		jerr = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, m)
	} else {
		jerr = json.Unmarshal(data, v)
	}
	if resp.StatusCode != http.StatusOK {
		msg := string(bytes.TrimSpace(data))
		if rep, ok := v.(*Reply); ok && jerr == nil && rep.Error != "" {
			msg = rep.Error
		}
		return &httpStatusError{code: resp.StatusCode, msg: msg}
	}
	if jerr != nil {
		return fmt.Errorf("%s: bad JSON answer: %w", req.URL.Redacted(), jerr)
	}
	return nil
}

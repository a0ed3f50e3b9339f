package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/storeurl"
)

const sessionUsage = `Usage:
  dlm session ls [--owner IDENTITY] [--limit N] [--json] [--store URL]
  dlm session kill [--store URL] ID... | --owner IDENTITY

ls lists a dlm server's open sessions in id order: id, the identity that
opened it (its owner; "-" without authentication), label, locks held or
queued, TTL, time left until it expires without a keepalive, and when it was
opened. With --owner, only that identity's, and what it uses of its quotas.

kill ends sessions, named by id or all those of one identity, as if they
had expired: their locks are released and their holders told.

Both need the admin permission of a server with authentication, and open no
session of their own (they work when the server has no room for one). The
store is a dlm:// or dlms:// URL (default $DLM_STORE, else
dlm://127.0.0.1:7420); the token in $DLM_TOKEN_FILE (or the URL's
token_file) is sent over TLS only. Exit status: 0 done, 2 usage, 69 the
server is unreachable, 77 credentials or rights refused.

Flags:
`

// sessionPage is the most sessions asked for in one call (the server's
// most, server.MaxListLimit).
const sessionPage = 1000

func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "ls" && args[0] != "kill") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, sessionUsage)
			return 0
		}
		fmt.Fprint(stderr, sessionUsage)
		return exitUsage
	}
	cmd := "dlm session " + args[0]
	var url, owner string
	var limit int
	var asJSON bool
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.StringVar(&url, "store", env("DLM_STORE", storeurl.DefaultURL), "dlm server URL (env DLM_STORE)")
	fs.StringVar(&owner, "owner", "", "only the sessions this identity opened")
	if args[0] == "ls" {
		fs.IntVar(&limit, "limit", 1000, "show at most this many sessions")
		fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	}
	if code, ok := parseFlags(fs, args[1:], sessionUsage, stderr); !ok {
		return code
	}
	var ids []uint64
	switch args[0] {
	case "ls":
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "%s: unexpected arguments %q (use --owner to filter)\n", cmd, fs.Args())
			return exitUsage
		}
		if limit < 1 {
			fmt.Fprintf(stderr, "%s: --limit %d: want at least 1\n", cmd, limit)
			return exitUsage
		}
	case "kill":
		for _, a := range fs.Args() {
			id, err := strconv.ParseUint(a, 10, 64)
			if err != nil || id == 0 {
				fmt.Fprintf(stderr, "%s: %q is not a session id\n", cmd, a)
				return exitUsage
			}
			ids = append(ids, id)
		}
		if (len(ids) == 0) == (owner == "") {
			fmt.Fprintf(stderr, "%s: name the sessions to end: ids, or --owner IDENTITY (not both)\n", cmd)
			return exitUsage
		}
	}
	conns, err := dialAdmin(url)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --store: %s\n", cmd, userMessage(err))
		return exitUsage
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var code int
	if args[0] == "ls" {
		code, err = listSessions(cctx, conns, owner, limit, asJSON, stdout)
	} else {
		code, err = killSessions(cctx, conns, ids, owner, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, userMessage(err))
	}
	return code
}

// dialAdmin makes a client of each server of a dlm URL, with its TLS and
// token, without opening a session.
func dialAdmin(url string) ([]*grpc.ClientConn, error) {
	spec, err := storeurl.Parse(url)
	if err != nil {
		return nil, err
	}
	if spec.Kind != storeurl.KindDLM {
		return nil, fmt.Errorf("%s is a %s store; only a dlm server has sessions to administer", storeurl.Redact(url), spec.Kind)
	}
	tlsCfg, tokenFile, err := spec.DLMSecurity()
	if err != nil {
		return nil, err
	}
	if tokenFile == "" {
		tokenFile = os.Getenv("DLM_TOKEN_FILE")
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tlsCfg != nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}
	}
	if tokenFile != "" {
		if tlsCfg == nil {
			return nil, errors.New("a token file is given, but the URL has no TLS: a token is never sent in plaintext (use dlms:// or tls=true)")
		}
		tok, err := dlmserver.ReadTokenFile(tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(tok)))
	}
	var conns []*grpc.ClientConn
	for _, h := range spec.Hosts {
		c, err := grpc.NewClient(h, opts...)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// bearerToken sends a bearer token with every call, over TLS only.
type bearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (bearerToken) RequireTransportSecurity() bool { return true }

// String keeps the token out of anything that prints it.
func (bearerToken) String() string { return "bearer token (redacted)" }

// onLeader runs call on each server in turn until one that is not
// unavailable (a follower names the leader but does not serve) answers.
func onLeader(conns []*grpc.ClientConn, call func(dlmpb.DLMClient) error) error {
	var err error
	for _, c := range conns {
		if err = call(dlmpb.NewDLMClient(c)); status.Code(err) != codes.Unavailable {
			return err
		}
	}
	return err
}

// adminExit is the exit code of a failed admin call.
func adminExit(err error) int {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return exitDenied
	case codes.InvalidArgument:
		return exitUsage
	}
	return exitUnavailable
}

// sessionJSON is one session in dlm session ls --json.
type sessionJSON struct {
	ID        uint64    `json:"id"`
	Owner     string    `json:"owner"`
	Label     string    `json:"label"`
	Locks     int64     `json:"locks"`
	TTL       string    `json:"ttl"`
	ExpiresIn string    `json:"expires_in,omitempty"`
	OpenedAt  time.Time `json:"opened_at"`
}

// ownerUsage is what the --owner identity uses of its quotas.
type ownerUsage struct {
	Owner        string `json:"owner"`
	Sessions     int64  `json:"sessions"`
	SessionQuota int64  `json:"session_quota"`
	Locks        int64  `json:"locks"`
	LockQuota    int64  `json:"lock_quota"`
}

func listSessions(ctx context.Context, conns []*grpc.ClientConn, owner string, limit int, asJSON bool, stdout io.Writer) (int, error) {
	out := []sessionJSON{}
	var use *ownerUsage
	more := false
	err := onLeader(conns, func(c dlmpb.DLMClient) error {
		out, more = out[:0], false
		var after uint64
		for len(out) < limit {
			resp, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{Owner: owner, After: after, Limit: int32(min(limit-len(out), sessionPage))})
			if err != nil {
				return err
			}
			for _, s := range resp.GetSessions() {
				j := sessionJSON{ID: s.GetId(), Owner: s.GetOwner(), Label: s.GetLabel(), Locks: s.GetLockCount(),
					TTL: s.GetTtl().AsDuration().String(), OpenedAt: s.GetOpenedAt().AsTime().UTC()}
				if s.GetExpiresIn() != nil {
					j.ExpiresIn = s.GetExpiresIn().AsDuration().String()
				}
				out = append(out, j)
			}
			if owner != "" {
				use = &ownerUsage{Owner: owner, Sessions: resp.GetOwnerSessions(), SessionQuota: resp.GetSessionQuota(),
					Locks: resp.GetOwnerLocks(), LockQuota: resp.GetLockQuota()}
			}
			if after = resp.GetNext(); after == 0 {
				return nil
			}
		}
		more = true
		return nil
	})
	if err != nil {
		return adminExit(err), err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Sessions []sessionJSON `json:"sessions"`
			More     bool          `json:"more,omitempty"`
			Usage    *ownerUsage   `json:"usage,omitempty"`
		}{out, more, use})
		return 0, nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tLABEL\tLOCKS\tTTL\tEXPIRES IN\tOPENED")
	for _, s := range out {
		o, exp := s.Owner, s.ExpiresIn
		if o == "" {
			o = "-"
		}
		if exp == "" {
			exp = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%q\t%d\t%s\t%s\t%s\n", s.ID, o, s.Label, s.Locks, s.TTL, exp, s.OpenedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
	if more {
		fmt.Fprintf(stdout, "(the first %d; raise --limit for more)\n", limit)
	}
	if use != nil && use.SessionQuota > 0 {
		fmt.Fprintf(stdout, "%s: %d of %d sessions, %d of %d locks (its quotas)\n", use.Owner, use.Sessions, use.SessionQuota, use.Locks, use.LockQuota)
	}
	return 0, nil
}

func killSessions(ctx context.Context, conns []*grpc.ClientConn, ids []uint64, owner string, stdout io.Writer) (int, error) {
	var resp *dlmpb.KillSessionsResponse
	err := onLeader(conns, func(c dlmpb.DLMClient) error {
		var err error
		resp, err = c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Sessions: ids, Owner: owner})
		return err
	})
	if err != nil {
		return adminExit(err), err
	}
	ended := resp.GetSessions()
	if len(ended) == 0 {
		fmt.Fprintln(stdout, "no session ended: none of them was open")
		return 0, nil
	}
	fmt.Fprintf(stdout, "ended %d sessions:", len(ended))
	for _, id := range ended {
		fmt.Fprintf(stdout, " %d", id)
	}
	fmt.Fprintln(stdout)
	return 0, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/internal/buildinfo"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/httpapi"
	"github.com/dlmhq/dlm/server/raftnode"
)

// Default addresses of `dlm server`.
const (
	defaultAddr     = "127.0.0.1:7420"
	defaultHTTPAddr = "127.0.0.1:7421"
	defaultRaftAddr = "127.0.0.1:7422"
	defaultDataDir  = "dlm-data"
)

// serverFlags are the settings of `dlm server`; each flag has an
// environment variable, and a flag given on the command line wins.
type serverFlags struct {
	addr, httpAddr, raftAddr, dataDir, nodeID, logLevel string
	peers, join, raftAdvertise, raftSource, logStore    string
	advertise, advertiseHTTP                            string
	inMemory, pprof                                     bool
	margin, raftTimeout                                 time.Duration
	logSegment                                          int
	sec                                                 securityFlags
	quotas                                              fsm.Quotas
	eventsPerIdentity                                   int
	tokenFloor                                          uint64
	limits                                              locktable.Limits
}

const serverUsage = `Usage: dlm server [flags]

Runs a dlm server node. With no flags: one durable node, gRPC on
127.0.0.1:7420, HTTP (dashboard, metrics, /v1/...) on 127.0.0.1:7421, data
in ./dlm-data. -peers or -join make it a member of a cluster.

Flags:
`

func runServer(ctx context.Context, args []string, stderr io.Writer) int {
	var f serverFlags
	fs, err := newServerFlagSet(&f)
	if err != nil {
		fmt.Fprintf(stderr, "dlm server: %v\n", err)
		return exitUsage
	}
	fs.SetOutput(stderr)
	if code, ok := parseFlags(fs, args, serverUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm server: unexpected arguments %q\n", fs.Args())
		return 2
	}
	for name, v := range map[string]int{"-max-sessions-per-identity": f.quotas.SessionsPerIdentity,
		"-max-locks-per-identity": f.quotas.LocksPerIdentity, "-max-event-streams-per-identity": f.eventsPerIdentity} {
		if v < 1 {
			fmt.Fprintf(stderr, "dlm server: %s %d: want at least 1\n", name, v)
			return 2
		}
	}
	if f.tokenFloor > locktable.MaxTokenFloor {
		fmt.Fprintf(stderr, "dlm server: -token-floor %d: above the most, %d\n", f.tokenFloor, uint64(locktable.MaxTokenFloor))
		return 2
	}
	if err := checkLimits(&f.limits); err != nil {
		fmt.Fprintf(stderr, "dlm server: %v\n", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "dlm server: -log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	for name, a := range map[string]string{"-advertise": f.advertise, "-advertise-http": f.advertiseHTTP, "-raft-advertise": f.raftAdvertise} {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			fmt.Fprintf(stderr, "dlm server: %s %q: want host:port\n", name, a)
			return 2
		}
	}
	var peers []raftnode.Peer
	if f.peers != "" {
		if f.join != "" {
			fmt.Fprintln(stderr, "dlm server: -peers and -join do not go together: bootstrap a new cluster, or join one")
			return 2
		}
		var err error
		if peers, err = raftnode.ParsePeers(f.peers); err != nil {
			fmt.Fprintf(stderr, "dlm server: -peers: %v\n", err)
			return 2
		}
	}

	sec, err := f.sec.load(f.join != "")
	if err != nil {
		fmt.Fprintf(stderr, "dlm server: %v\n", err)
		return 2
	}
	if sec.tokens != nil && sec.tls == nil {
		log.Warn("dlm server: bearer tokens without -tls-cert: clients send them in plaintext; use TLS beyond loopback")
	}

	srv, err := server.Start(server.Config{
		Node: raftnode.Config{
			ID:             f.nodeID,
			Dir:            f.dataDir,
			InMemory:       f.inMemory,
			LogStore:       f.logStore,
			LogSegmentSize: f.logSegment,
			BindAddr:       f.raftAddr,
			Advertise:      f.raftAdvertise,
			SourceIP:       f.raftSource,
			RaftTLS:        sec.raftTLS,
			Peers:          peers,
			Join:           f.join != "",
			Quotas:         f.quotas,
			Limits:         f.limits,
			Raft: func(rc *raft.Config) {
				rc.HeartbeatTimeout, rc.ElectionTimeout = f.raftTimeout, f.raftTimeout
				rc.LeaderLeaseTimeout = min(rc.LeaderLeaseTimeout, f.raftTimeout/2)
			},
		},
		Addr:              f.addr,
		AdvertiseAddr:     f.advertise,
		AdvertiseHTTPAddr: f.advertiseHTTP,
		HTTPAddr:          f.httpAddr,
		SessionMargin:     f.margin,
		TokenFloor:        f.tokenFloor,
		Logger:            log,
		Pprof:             f.pprof,
		TLS:               sec.tls,
		Tokens:            sec.tokens,
		Rules:             sec.rules,

		// Issue 17, item 5: per-identity bounds.
		MaxEventStreamsPerIdentity: f.eventsPerIdentity,
	})
	if err != nil {
		// One line, the error alone: "data dir X is in use by another dlm
		// server (pid N)", "listen: ... address already in use"...
		msg := err.Error()
		if !strings.HasPrefix(msg, "dlm server: ") {
			msg = "dlm server: cannot start: " + msg
		}
		fmt.Fprintln(stderr, msg)
		if errors.Is(err, raftnode.ErrDataDirInUse) {
			return exitBusy // held by another, like a lock: it may be free later
		}
		return 1
	}
	if ctx.Err() != nil { // a signal while the node opened
		return stopStarting(ctx, srv, stderr, "while starting")
	}
	mode := "durable"
	if f.inMemory {
		mode = "in-memory"
	}
	log.Info("dlm server: started", "addr", srv.Addr(), "http", srv.HTTPAddr(), "raft", srv.Node().Addr(), "data", f.dataDir, "log", mode, "build", buildinfo.Read())
	if f.join != "" {
		if err := srv.Join(ctx, f.join, sec.join...); err != nil {
			if ctx.Err() != nil {
				return stopStarting(ctx, srv, stderr, "while joining the cluster via "+f.join)
			}
			log.Error("dlm server: cannot join the cluster", "via", f.join, "err", err)
			srv.Close()
			return 1
		}
		log.Info("dlm server: joined the cluster", "via", f.join)
	}
	if err := srv.Node().WaitForLeader(ctx); err != nil {
		return stopStarting(ctx, srv, stderr, "while waiting for a leader (a majority of the voters must be up)")
	}
	<-ctx.Done()
	log.Info("dlm server: shutting down")
	if err := srv.Close(); err != nil {
		log.Error("dlm server: shutdown", "err", err)
		return 1
	}
	log.Info("dlm server: stopped")
	return 0
}

// newServerFlagSet returns the flag set of `dlm server`, which reads into
// f. Every flag takes its default from its environment variable when that
// is set (a flag on the command line wins); the error names a variable
// whose value cannot be read.
func newServerFlagSet(f *serverFlags) (*flag.FlagSet, error) {
	var e envDefaults
	fs := flag.NewFlagSet("dlm server", flag.ContinueOnError)
	fs.StringVar(&f.addr, "addr", env("DLM_ADDR", defaultAddr), "client address: gRPC and the session transport (env DLM_ADDR)")
	fs.StringVar(&f.httpAddr, "http", env("DLM_HTTP_ADDR", defaultHTTPAddr), "HTTP address for /healthz, /readyz, /metrics and /v1/...; empty disables (env DLM_HTTP_ADDR)")
	fs.StringVar(&f.raftAddr, "raft-addr", env("DLM_RAFT_ADDR", defaultRaftAddr), "Raft transport address (env DLM_RAFT_ADDR)")
	fs.StringVar(&f.dataDir, "data", env("DLM_DATA", defaultDataDir), "data directory: the Raft log and snapshots (env DLM_DATA)")
	fs.StringVar(&f.nodeID, "id", env("DLM_NODE_ID", "node-1"), "Raft node id (env DLM_NODE_ID)")
	fs.StringVar(&f.logStore, "log-store", env("DLM_LOG_STORE", ""), "the durable Raft log of a new data dir: wal (one fsync per append; the default) or bolt; a data dir keeps the store it holds (env DLM_LOG_STORE)")
	fs.IntVar(&f.logSegment, "log-segment-size", e.int("DLM_LOG_SEGMENT_SIZE", raftnode.DefaultLogSegmentSize), "the size in bytes of the wal log's segments, each preallocated whole: 65536 to 1073741824 (see docs/operations.md for the space a node needs; env DLM_LOG_SEGMENT_SIZE)")
	fs.BoolVar(&f.inMemory, "in-memory", envBool("DLM_IN_MEMORY"), "keep the Raft log in memory: fast, but every restart starts empty (env DLM_IN_MEMORY)")
	fs.BoolVar(&f.pprof, "pprof", envBool("DLM_PPROF"), "serve Go's profiles on the HTTP address under /debug/pprof/ (admin only with authentication; env DLM_PPROF)")
	fs.StringVar(&f.logLevel, "log-level", env("DLM_LOG_LEVEL", "info"), "debug, info, warn or error (env DLM_LOG_LEVEL)")
	fs.StringVar(&f.peers, "peers", env("DLM_PEERS", ""), "bootstrap a cluster of these voters, this node included: id=raft-host:port,... (the same list on every node; env DLM_PEERS)")
	fs.StringVar(&f.join, "join", env("DLM_JOIN", ""), "join the cluster through the HTTP address of a member: host:port[,host:port...] (env DLM_JOIN)")
	fs.StringVar(&f.raftAdvertise, "raft-advertise", env("DLM_RAFT_ADVERTISE", ""), "the Raft address other nodes reach this one at, if not -raft-addr (env DLM_RAFT_ADVERTISE)")
	fs.StringVar(&f.advertise, "advertise", env("DLM_ADVERTISE", ""), "the gRPC address followers send clients to when this node leads, if not -addr (env DLM_ADVERTISE)")
	fs.StringVar(&f.advertiseHTTP, "advertise-http", env("DLM_ADVERTISE_HTTP", ""), "the HTTP address members send membership calls to when this node leads, if not -http (env DLM_ADVERTISE_HTTP)")
	fs.StringVar(&f.raftSource, "raft-source", env("DLM_RAFT_SOURCE", ""), "the local IP to bind outgoing Raft connections to (env DLM_RAFT_SOURCE)")
	fs.DurationVar(&f.raftTimeout, "raft-timeout", e.duration("DLM_RAFT_TIMEOUT", time.Second), "Raft heartbeat and election timeout; lower it on a fast, quiet network (env DLM_RAFT_TIMEOUT)")
	fs.DurationVar(&f.margin, "session-margin", e.duration("DLM_SESSION_MARGIN", server.DefaultSessionMargin), "added to every session's deadline when this node becomes leader (env DLM_SESSION_MARGIN)")
	fs.IntVar(&f.quotas.SessionsPerIdentity, "max-sessions-per-identity", e.int("DLM_MAX_SESSIONS_PER_IDENTITY", fsm.DefaultSessionsPerIdentity), "the most sessions one authenticated identity may have open (the same on every node; env DLM_MAX_SESSIONS_PER_IDENTITY)")
	fs.IntVar(&f.quotas.LocksPerIdentity, "max-locks-per-identity", e.int("DLM_MAX_LOCKS_PER_IDENTITY", fsm.DefaultLocksPerIdentity), "the most locks, held or queued, one authenticated identity may have (the same on every node; env DLM_MAX_LOCKS_PER_IDENTITY)")
	fs.IntVar(&f.eventsPerIdentity, "max-event-streams-per-identity", e.int("DLM_MAX_EVENT_STREAMS_PER_IDENTITY", httpapi.DefaultMaxEventStreamsPerIdentity), "the most /v1/events streams one authenticated identity may have open (env DLM_MAX_EVENT_STREAMS_PER_IDENTITY)")
	fs.Uint64Var(&f.tokenFloor, "token-floor", e.uint64("DLM_TOKEN_FLOOR", 0), "whenever this node becomes leader, raise the fencing tokens above this (after restoring an old copy of the state: above every token issued; at most 2^62; env DLM_TOKEN_FLOOR)")
	f.sec.register(fs)
	registerLimits(fs, &f.limits, &e)
	return fs, e.err
}

// stopStarting closes srv, stopped by the end of ctx (a signal) before it
// ever served, says so in one line and returns the exit code: 128+N for
// signal N, else 1.
func stopStarting(ctx context.Context, srv *server.Server, stderr io.Writer, waiting string) int {
	_ = srv.Close() // it never served: nothing to hand over, nothing to report
	if se, ok := stoppedBy(ctx); ok {
		fmt.Fprintf(stderr, "dlm server: %v %s\n", se, waiting)
		return exitSignalBase + int(se.sig)
	}
	fmt.Fprintf(stderr, "dlm server: stopped %s\n", waiting)
	return 1
}

// env returns the environment variable key, or def when it is unset.
func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// envBool reads a boolean environment variable ("1", "true", "yes").
func envBool(key string) bool {
	switch strings.ToLower(os.Getenv(key)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

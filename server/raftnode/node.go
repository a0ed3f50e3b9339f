package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/locktable"
)

// Config configures a Node. Only Dir is required (unless InMemory).
type Config struct {
	// ID is the Raft server id; default "node-1".
	ID string
	// Dir holds the Raft log and the snapshots. It is created if missing.
	// A Dir without Raft state that holds a RestoreFile (see
	// PrepareRestore) starts from that snapshot file, in a cluster of
	// Peers (or of this node alone), instead of an empty state.
	Dir string
	// LogStore is the durable log of a new Dir: LogStoreWAL (the default)
	// or LogStoreBolt. A Dir that holds a log keeps its store; naming
	// another is an error (ErrLogStore).
	LogStore string
	// InMemory keeps the log, the stable store and the snapshots in memory:
	// every restart begins from an empty state. For tests and throwaway
	// servers only.
	InMemory bool
	// BindAddr is the Raft TCP transport's address; default "127.0.0.1:0"
	// (a free loopback port).
	BindAddr string
	// Limits are the lock table's limits; every replica must use the same.
	// MaxNameLen defaults to DefaultMaxNameLen, the others to the table's
	// defaults.
	Limits locktable.Limits
	// Quotas bound the sessions and locks of one authenticated identity;
	// every replica must use the same. Zero fields take the defaults
	// (DefaultSessionsPerIdentity, DefaultLocksPerIdentity).
	Quotas fsm.Quotas
	// Logger receives the node's and Raft's logs; nil discards them.
	Logger *slog.Logger
	// MaxBatch is about how many commands one Raft entry carries (a single
	// larger proposal still goes whole); default 1024.
	MaxBatch int
	// MaxInflight is how many entries may await commit at once; proposals
	// arriving meanwhile are batched. Default 2.
	MaxInflight int
	// ApplyTimeout bounds the wait to enqueue an entry in Raft, and
	// Barrier's wait when its context has no deadline; default 10s.
	ApplyTimeout time.Duration
	// Raft, if set, adjusts the Raft configuration (timeouts, snapshot
	// thresholds) before the node starts.
	Raft func(*raft.Config)
	// Peers, for a node without Raft state, is the cluster to bootstrap:
	// every voter, this node included, each node given the same list. Empty
	// bootstraps a cluster of this node alone, unless Join is set.
	Peers []Peer
	// Join, for a node without Raft state, bootstraps nothing: the node
	// waits to be added to an existing cluster (see Server.Join).
	Join bool
	// Advertise is the Raft address other nodes reach this one at; default
	// the bound address.
	Advertise string
	// SourceIP, if set, is the local IP outgoing Raft connections are
	// bound to.
	SourceIP string
	// RaftTLS, if set, secures Raft between nodes: every node of the
	// cluster must use one (see NewRaftTLS and LoadRaftTLS), and a node
	// refuses a peer whose certificate its CA did not sign for a node.
	// Nil is plain TCP.
	RaftTLS *tls.Config
	// StorageFault, if set, is called before each write of the log, the
	// stable store and the snapshots (store is StoreLog, StoreStable or
	// StoreSnapshot); an error it returns fails that write, unwritten, as
	// a full or failing disk would. For fault-injection tests.
	StorageFault func(store, op string) error

	// LogSegmentSize is the size in bytes of the durable log's segments
	// (the wal store's), each preallocated whole when it is made: from
	// MinLogSegmentSize to MaxLogSegmentSize; 0 is DefaultLogSegmentSize.
	// A node on a small disk, or a test that fills one, takes smaller
	// segments; a data dir's existing segments keep their size.
	LogSegmentSize int
}

// The durable log's segment sizes (Config.LogSegmentSize).
const (
	DefaultLogSegmentSize = 64 << 20 // raft-wal's default
	MinLogSegmentSize     = 64 << 10 // 64 KiB
	MaxLogSegmentSize     = 1 << 30  // 1 GiB
)

// ErrLogSegmentSize is a Config.LogSegmentSize out of its bounds.
var ErrLogSegmentSize = fmt.Errorf("dlm server: the log segment size lies between %d and %d bytes", MinLogSegmentSize, MaxLogSegmentSize)

// Peer is one voter of a cluster to bootstrap.
type Peer struct {
	ID, Addr string
}

// ParsePeers parses "id=host:port,id=host:port,...". Spaces around an id or
// an address are ignored; no id and no address may be named twice.
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	ids, addrs := map[string]bool{}, map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(part, "=")
		id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("dlm server: peer %q: want id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("dlm server: peer %q: %v", part, err)
		}
		if ids[id] || addrs[addr] {
			return nil, fmt.Errorf("dlm server: peer %q named twice", part)
		}
		ids[id], addrs[addr] = true, true
		out = append(out, Peer{ID: id, Addr: addr})
	}
	return out, nil
}

// Node is a single-voter Raft node (a cluster of one until members are
// added) running the FSM. It batches concurrent proposals into one Raft
// entry and stamps each entry with its clock. Close it to stop it.
type Node struct {
	cfg       Config
	log       *slog.Logger
	fsm       *fsm.FSM
	raft      *raft.Raft
	transport *raft.NetworkTransport
	retrying  *retryTransport // transport, as Raft uses it (see retryTransport)
	layer     *streamLayer
	closers   []io.Closer // stores, closed after raft
	logStore  string      // LogStoreWAL or LogStoreBolt; "" in memory
	storage   *storageWatch

	queue    queue          // proposals not yet in an entry
	inflight chan inflight  // entries awaiting commit, for the waiter; room for MaxInflight
	stop     chan struct{}  // closed by Close
	raftDown chan struct{}  // closed once Raft has shut down
	notify   chan bool      // Raft's leadership notifications
	wg       sync.WaitGroup // watchLeadership
	pipeline sync.WaitGroup // the waiter

	applyObserver atomic.Pointer[func(time.Duration)] // see observeApplyLatency

	leaderMu sync.Mutex
	leader   bool
	changed  chan struct{} // closed and replaced on every leadership change

	closeOnce sync.Once
	closeErr  error
}

// Open starts a node. With no existing Raft state it bootstraps a cluster of
// itself; otherwise it recovers from its snapshot and log. Use WaitLeader
// and Barrier before serving.
func Open(cfg Config) (*Node, error) {
	cfg.setDefaults()
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger,
		fsm:      fsm.NewFSMWithQuotas(cfg.Limits, cfg.Quotas),
		inflight: make(chan inflight, cfg.MaxInflight),
		stop:     make(chan struct{}),
		raftDown: make(chan struct{}),
		notify:   make(chan bool, 1),
		changed:  make(chan struct{}),
	}
	n.storage = newStorageWatch(cfg.Logger, cfg.StorageFault)
	n.wg.Add(1)
	go n.watchLeadership()
	if err := n.start(); err != nil {
		if isStorageErrno(err) && !errors.Is(err, ErrStorage) {
			err = fmt.Errorf("%w: %w", ErrStorage, err)
		}
		close(n.raftDown)
		n.wg.Wait()
		return nil, errors.Join(err, n.closeStores())
	}
	n.queue.free = cfg.MaxInflight
	n.pipeline.Add(1)
	go n.await()
	return n, nil
}

// SnapshotInterval is how often a node checks whether its log holds
// enough new entries for a snapshot (hashicorp/raft's SnapshotThreshold,
// 8,192), at a random moment between one and two intervals. Raft's own
// default, 2 minutes, restarts with the node: a node restarted more often
// than that never snapshotted, and its log, its start and its catching up
// grew without end. Consul checks every 5 s too.
const SnapshotInterval = 5 * time.Second

// retainSnapshots is how many snapshots the node keeps on disk.
const retainSnapshots = 2

// DefaultMaxNameLen is the server's default Limits.MaxNameLen: the longest
// resource name package dlm accepts.
const DefaultMaxNameLen = 512

func (c *Config) setDefaults() {
	if c.Limits.MaxNameLen <= 0 {
		c.Limits.MaxNameLen = DefaultMaxNameLen
	}
	if c.ID == "" {
		c.ID = "node-1"
	}
	if c.BindAddr == "" {
		c.BindAddr = "127.0.0.1:0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 2
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = 10 * time.Second
	}
}

// start opens the stores and the transport and starts Raft.
func (n *Node) start() error {
	hl := newHclog(n.log, n.storage.anyFail.Load)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.Logger = hl.Named("raft")
	rc.SnapshotInterval = SnapshotInterval
	if n.cfg.Raft != nil {
		n.cfg.Raft(rc)
	}
	rc.NotifyCh = n.notify
	rc.BatchApplyCh = true // entries are handed over without waiting for the leader's loop (see cut)
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("dlm server: raft config: %w", err)
	}

	logs, stable, snaps, err := n.openStores(hl)
	if err != nil {
		return err
	}
	n.transport, n.layer, err = newTransport(n.cfg.BindAddr, n.cfg.Advertise, n.cfg.SourceIP, n.cfg.RaftTLS, hl.Named("transport"))
	if err != nil {
		return err
	}
	n.closers = append(n.closers, transportCloser{n.transport})
	n.retrying = newRetryTransport(n.transport, n.stop, n.log)

	exists, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("dlm server: raft state: %w", err)
	}
	restored, err := n.seedRestore(exists, snaps, func() (raft.Configuration, error) { return n.bootstrapConfig(rc.LocalID) })
	if err != nil {
		return err
	}
	if !exists && !restored && !n.cfg.Join {
		conf, err := n.bootstrapConfig(rc.LocalID)
		if err != nil {
			return err
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, n.retrying, conf); err != nil {
			return fmt.Errorf("dlm server: bootstrap: %w", err)
		}
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, stable, snaps, n.retrying)
	if err != nil {
		return fmt.Errorf("dlm server: start raft: %w", err)
	}
	n.retrying.setRaft(n.raft)
	n.log.Info("dlm server: raft started", "id", n.cfg.ID, "addr", n.transport.LocalAddr(),
		"dir", n.cfg.Dir, "in_memory", n.cfg.InMemory, "bootstrapped", !exists && !restored, "restored", restored)
	return nil
}

// bootstrapConfig is the first configuration: Peers, or this node alone.
func (n *Node) bootstrapConfig(self raft.ServerID) (raft.Configuration, error) {
	if len(n.cfg.Peers) == 0 {
		return raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: self, Address: n.transport.LocalAddr(),
		}}}, nil
	}
	var conf raft.Configuration
	found := false
	for _, p := range n.cfg.Peers {
		found = found || raft.ServerID(p.ID) == self
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	if !found {
		return conf, fmt.Errorf("dlm server: this node's id %q is not among the peers", self)
	}
	return conf, nil
}

// AddVoter adds a voter to the cluster, or updates its address. Only the
// leader can; others return raft.ErrNotLeader.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	return n.waitFuture(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.cfg.ApplyTimeout))
}

// RemoveServer removes a server from the cluster. Only the leader can;
// others return raft.ErrNotLeader. A leader may remove itself: it steps
// down once the change commits.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	return n.waitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout))
}

// waitFuture waits for a Raft future or ctx.
func (n *Node) waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("dlm server: membership change: %w", ctx.Err())
	}
}

// openStores locks Dir (see lockDataDir) and opens the log, stable and
// snapshot stores: the durable log Config.LogStore names (see logStoreOf:
// raft-wal by default, or the bbolt file of an older data directory) and a
// FileSnapshotStore in Dir; or in-memory stores.
//
// The log was in raft-wal before, then in bbolt for a while: raft-wal
// v0.4.0 could not reopen a log whose tail Raft truncated (a deposed
// leader's uncommitted entries), which the fault harness hit on restarts
// after kill -9 (hashicorp/raft-wal#31). v0.4.2 reopens it
// (TestLogReopensAfterTailTruncation).
func (n *Node) openStores(hl hclog.Logger) (raft.LogStore, raft.StableStore, raft.SnapshotStore, error) {
	if n.cfg.InMemory {
		mem := raft.NewInmemStore()
		return watchedLog{LogStore: mem, w: n.storage}, watchedStable{StableStore: mem, w: n.storage}, raft.NewInmemSnapshotStore(), nil
	}
	if n.cfg.Dir == "" {
		return nil, nil, nil, errors.New("dlm server: Config.Dir is required unless InMemory")
	}
	if err := os.MkdirAll(n.cfg.Dir, 0o750); err != nil {
		return nil, nil, nil, fmt.Errorf("dlm server: data dir: %w", err)
	}
	// Another server on the same directory would block on the store's
	// lock: refuse it at once, naming the holder.
	lock, err := lockDataDir(n.cfg.Dir)
	if err != nil {
		return nil, nil, nil, err
	}
	n.closers = append(n.closers, lock) // closed last: after the stores
	kind, err := logStoreOf(n.cfg.Dir, n.cfg.LogStore)
	if err != nil {
		return nil, nil, nil, err
	}
	logs, stable, err := n.openLog(kind, hl)
	if err != nil {
		return nil, nil, nil, err
	}
	n.logStore = kind
	n.log.Info("dlm server: raft log", "store", kind, "dir", n.cfg.Dir)
	files, err := raft.NewFileSnapshotStoreWithLogger(n.cfg.Dir, retainSnapshots, hl.Named("snapshots"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dlm server: snapshot store: %w", err)
	}
	snaps := watchedSnapshots{SnapshotStore: files, dir: filepath.Join(n.cfg.Dir, "snapshots"), w: n.storage}
	if k := snaps.removeTmp(""); k > 0 {
		n.log.Info("dlm server: removed unfinished snapshots", "count", k, "dir", snaps.dir)
	}
	return watchedLog{LogStore: logs, w: n.storage}, watchedStable{StableStore: stable, w: n.storage}, snaps, nil
}

// FSM returns the node's state machine, for reads.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Addr returns the Raft transport's address.
func (n *Node) Addr() string { return string(n.transport.LocalAddr()) }

// IsLeader reports whether the node is the Raft leader now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leadership reports whether the node is the leader, as of the last
// leadership change Raft notified, and a channel closed at the next change.
func (n *Node) Leadership() (leader bool, changed <-chan struct{}) {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	return n.leader, n.changed
}

// watchLeadership consumes Raft's leadership notifications (Raft blocks on
// them) until Raft has shut down.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	for {
		select {
		case v := <-n.notify:
			n.leaderMu.Lock()
			if v != n.leader {
				n.leader = v
				close(n.changed)
				n.changed = make(chan struct{})
				if n.storage.anyFail.Load() { // Raft steps down and is elected again, over and over
					n.storage.rate.Log(context.Background(), n.log, slog.LevelInfo, "leadership", "dlm server: leadership changed", "leader", v)
				} else {
					n.log.Info("dlm server: leadership changed", "leader", v)
				}
			}
			n.leaderMu.Unlock()
		case <-n.raftDown:
			return
		}
	}
}

// VerifyLeader confirms that the node is still the leader, with a quorum
// when it has peers. Nothing that a leader answered before VerifyLeader
// returns nil can have been overruled by another leader.
func (n *Node) VerifyLeader() error {
	if err := raftErr(n.raft.VerifyLeader().Error()); err != nil {
		return fmt.Errorf("dlm server: verify leadership: %w", n.storageErr(err))
	}
	return nil
}

// WaitLeader waits until the node is the leader or ctx is done.
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !n.IsLeader() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("dlm server: wait for leadership: %w", ctx.Err())
		case <-n.stop:
			return ErrClosed
		case <-t.C:
		}
	}
	return nil
}

// WaitForLeader waits until the node knows a leader of its cluster (itself
// or another), or ctx ends. Until then no node of the cluster serves: a
// quorum of the voters is not up, or a joining node was not added yet.
func (n *Node) WaitForLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, addr := n.Leader(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			if _, addr := n.Leader(); addr != "" { // elected since the last look
				return nil
			}
			return fmt.Errorf("dlm server: wait for a leader: %w", ctx.Err())
		case <-n.stop:
			return ErrClosed
		case <-t.C:
		}
	}
}

// Barrier waits until every entry committed before it is applied to the
// FSM. It must run on the leader. It waits at most until ctx's deadline, or
// Config.ApplyTimeout if ctx has none; a cancelled ctx without deadline is
// noticed only at the end.
func (n *Node) Barrier(ctx context.Context) error {
	timeout := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	if err := raftErr(n.raft.Barrier(timeout).Error()); err != nil {
		return fmt.Errorf("dlm server: barrier: %w", n.storageErr(err))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlm server: barrier: %w", err)
	}
	return nil
}

// Close stops the queue (proposals not yet in an entry fail with
// ErrClosed), waits for the entries in flight to be answered while Raft
// still runs, then shuts Raft down and closes the transport and stores. It
// is safe to call more than once.
//
// Raft can drop the answer to an entry still in its pipeline when it shuts
// down, which would leave a proposer waiting forever; draining first avoids
// that. If the entries are not answered within ApplyTimeout, Raft is shut
// down anyway.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.stop)
		n.closeQueue()
		drained := make(chan struct{})
		go func() { n.pipeline.Wait(); close(drained) }()
		timer := time.NewTimer(n.cfg.ApplyTimeout)
		defer timer.Stop()
		var errs []error
		select {
		case <-drained:
		case <-timer.C:
			errs = append(errs, errors.New("dlm server: entries in flight unanswered at close"))
		}
		errs = append(errs, n.raft.Shutdown().Error())
		close(n.raftDown)
		n.wg.Wait()
		timer.Reset(n.cfg.ApplyTimeout)
		select { // answered by the shutdown, or given up
		case <-drained:
		case <-timer.C:
		}
		n.closeErr = errors.Join(append(errs, n.closeStores())...)
	})
	return n.closeErr
}

func (n *Node) closeStores() error {
	var errs []error
	for i := len(n.closers) - 1; i >= 0; i-- {
		errs = append(errs, n.closers[i].Close())
	}
	n.closers = nil
	return errors.Join(errs...)
}

// raftErr maps Raft's leadership errors to the server's.
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	}
	return err
}

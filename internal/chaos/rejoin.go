package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"

	"google.golang.org/grpc"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
)

// RejoinConfig configures MeasureRejoin.
type RejoinConfig struct {
	Bin    string // the dlm binary the nodes run
	Dir    string // where data and logs go
	Cycles int    // kill/restart cycles; default 20
	// Down and MaxDown bound how long a killed node stays down, the
	// cluster taking writes meanwhile: the cycles' down times are spread
	// evenly from Down to MaxDown (the catch-up time depends on where a
	// restart falls in Raft's backoff, so one fixed down time would show one
	// phase of it). Default 1s and 2s; MaxDown is at least Down.
	Down, MaxDown time.Duration
	// LeaderEvery makes every LeaderEvery-th cycle kill the leader instead
	// of a follower; default 4, negative never.
	LeaderEvery int
	RaftTimeout time.Duration // the nodes' -raft-timeout; default 100ms
	// Timeout bounds each cycle's wait for a healthy cluster; default 30s.
	Timeout time.Duration
	Log     io.Writer // one line per cycle; nil discards
}

// setDefaults fills in the defaults the fields' comments give.
func (c *RejoinConfig) setDefaults() {
	if c.Cycles <= 0 {
		c.Cycles = 20
	}
	if c.Down <= 0 {
		c.Down = time.Second
	}
	if c.MaxDown <= 0 {
		c.MaxDown = 2 * time.Second
	}
	c.MaxDown = max(c.MaxDown, c.Down)
	if c.LeaderEvery == 0 {
		c.LeaderEvery = 4
	}
	if c.RaftTimeout <= 0 {
		c.RaftTimeout = 100 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Rejoin is what one kill/restart cycle measured.
type Rejoin struct {
	Node   string
	Leader bool // the node was the leader when killed
	// Down is from the kill to the restart.
	Down time.Duration
	// Behind is how many entries the cluster applied while the node was
	// down: the leader's applied index at the restart less the node's at
	// the kill.
	Behind uint64
	// Start is from the restart to the process serving its ports (it has
	// opened its log by then).
	Start time.Duration
	// CatchUp is from the process serving its ports to the cluster being
	// healthy again (Cluster.AwaitHealthy): the node follows the leader and
	// has applied the leader's log. It is the time a 3-node cluster runs
	// on two nodes after the restart.
	CatchUp time.Duration
}

// MeasureRejoin starts a cluster and runs cycles of: kill -9 a node (a
// follower, or the leader every LeaderEvery-th cycle), keep it down (Down
// to MaxDown) while the cluster takes writes (locks taken and released
// through remote), restart it on the same data, and time until it has
// caught up. It returns the cycles measured, also those before an error.
func MeasureRejoin(ctx context.Context, cfg RejoinConfig) ([]Rejoin, error) {
	cfg.setDefaults()
	nw := NewNet()
	defer nw.Close()
	c, err := StartCluster(ctx, ClusterConfig{Bin: cfg.Bin, Dir: cfg.Dir, RaftTimeout: cfg.RaftTimeout}, nw)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := newRejoinWriter(c)
	defer w.close()
	var out []Rejoin
	for i := range cfg.Cycles {
		leader := cfg.LeaderEvery > 0 && (i+1)%cfg.LeaderEvery == 0
		down := cfg.Down
		if cfg.Cycles > 1 {
			down += (cfg.MaxDown - cfg.Down) * time.Duration(i) / time.Duration(cfg.Cycles-1)
		}
		r, err := rejoinCycle(ctx, c, w, cfg, i, leader, down)
		if err != nil {
			return out, fmt.Errorf("chaos: rejoin cycle %d: %w", i+1, err)
		}
		out = append(out, r)
		fmt.Fprintf(cfg.Log, "cycle %2d: %s (leader %v) down %s, %d entries behind; started in %s, caught up %s later\n",
			i+1, r.Node, r.Leader, roundMs(r.Down), r.Behind, roundMs(r.Start), roundMs(r.CatchUp))
	}
	return out, nil
}

// rejoinCycle is one cycle of MeasureRejoin; cycle picks the follower.
// The node stays down for down, and until a write went through.
func rejoinCycle(ctx context.Context, c *Cluster, w *rejoinWriter, cfg RejoinConfig, cycle int, killLeader bool, down time.Duration) (Rejoin, error) {
	leader, _, err := c.AwaitHealthy(ctx, cfg.Timeout)
	if err != nil {
		return Rejoin{}, err
	}
	victim := leader
	if !killLeader {
		var followers []*Node
		for _, n := range c.Nodes {
			if n != leader {
				followers = append(followers, n)
			}
		}
		victim = followers[cycle%len(followers)]
	}
	hc := &http.Client{Timeout: time.Second}
	st, err := victim.status(ctx, hc)
	if err != nil {
		return Rejoin{}, err
	}
	r := Rejoin{Node: victim.ID, Leader: killLeader}
	victim.Kill()
	killed := time.Now()

	// Writes while the node is down, at least one of them done: the node
	// has entries to fetch when it is back.
	wrote := 0
	for time.Since(killed) < down || wrote == 0 {
		if time.Since(killed) > down+cfg.Timeout {
			return r, errors.New("no write succeeded while the node was down")
		}
		if err := w.write(ctx); err == nil {
			wrote++
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	now, err := c.Leader(ctx, cfg.Timeout)
	if err != nil {
		return r, err
	}
	lst, err := now.status(ctx, hc)
	if err != nil {
		return r, err
	}
	if lst.AppliedIndex > st.AppliedIndex {
		r.Behind = lst.AppliedIndex - st.AppliedIndex
	}

	restart := time.Now()
	r.Down = restart.Sub(killed)
	if err := victim.Restart(ctx); err != nil {
		return r, err
	}
	ready := time.Now()
	r.Start = ready.Sub(restart)
	if _, _, err := c.AwaitHealthy(ctx, cfg.Timeout); err != nil {
		return r, err
	}
	r.CatchUp = time.Since(ready)
	return r, nil
}

// rejoinWriter advances the cluster's log: each write takes a lock of its
// own and releases it, through remote on a session of its own, which it
// opens again after a failure (a killed leader may have taken it along).
type rejoinWriter struct {
	addrs string
	dial  grpc.DialOption
	store *dlmserver.Store
	n     int
}

// newRejoinWriter returns a writer to c through its client proxies.
func newRejoinWriter(c *Cluster) *rejoinWriter {
	m := c.AddrMap()
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if p, ok := m[addr]; ok {
			addr = p // a follower names the leader's own address
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	return &rejoinWriter{addrs: c.ClientAddrs(), dial: grpc.WithContextDialer(dialer)}
}

// write takes and releases one lock, within 2s.
func (w *rejoinWriter) write(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if w.store == nil {
		s, err := dlmserver.Dial(ctx, w.addrs, dlmserver.WithSessionTTL(2*time.Second), dlmserver.WithLabel("rejoin"),
			dlmserver.WithDialOptions(w.dial))
		if err != nil {
			return err
		}
		w.store = s
	}
	w.n++
	l, err := dlm.New(w.store).Acquire(ctx, fmt.Sprintf("rejoin-%d", w.n))
	if err == nil {
		err = l.Release(ctx)
	}
	if err != nil {
		w.close()
	}
	return err
}

// close ends the writer's session, if any.
func (w *rejoinWriter) close() {
	if w.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = w.store.Close(ctx)
	w.store = nil
}

// RejoinSummary sums up cycles: percentiles of the catch-up and start
// times, and the largest lag.
func RejoinSummary(rs []Rejoin) string {
	var catchUp, start, total []time.Duration
	var behind uint64
	for _, r := range rs {
		catchUp = append(catchUp, r.CatchUp)
		start = append(start, r.Start)
		total = append(total, r.Start+r.CatchUp)
		behind = max(behind, r.Behind)
	}
	line := func(name string, ds []time.Duration) string {
		return fmt.Sprintf("%s: p50 %s p99 %s max %s\n", name, roundMs(history.Percentile(ds, 50)), roundMs(history.Percentile(ds, 99)), roundMs(history.Percentile(ds, 100)))
	}
	return fmt.Sprintf("%d cycles, up to %d entries behind\n", len(rs), behind) +
		line("caught up after serving (ready -> healthy)", catchUp) +
		line("process start (restart -> ready)       ", start) +
		line("restart -> caught up                   ", total)
}

// roundMs rounds d to the millisecond, for printing.
func roundMs(d time.Duration) string { return d.Round(time.Millisecond).String() }

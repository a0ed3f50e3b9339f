package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"
	"github.com/dlmhq/dlm/internal/testenv"
)

// readyLine is the log line every `dlm server` prints once it serves its
// ports (leader or not).
const readyLine = "dlm server: started"

// ClusterConfig configures a cluster of `dlm server` processes.
type ClusterConfig struct {
	Bin           string        // the dlm binary
	Dir           string        // data and logs go under it
	Nodes         int           // default 3
	RaftTimeout   time.Duration // -raft-timeout: heartbeat and election timeout; default 100ms
	SessionMargin time.Duration // -session-margin; default 200ms (see Config.SessionMargin)
	// DiskSize, if set, puts each node's data dir on a tmpfs of its own
	// of this many bytes, which FillDisk can fill (mounting needs root),
	// and the nodes log in segments of LogSegmentSize bytes, so that a
	// full disk stops their writes soon. A tmpfs's fsync costs nothing:
	// such a cluster is faster than one on a disk.
	DiskSize       int64
	LogSegmentSize int
}

// Node is one `dlm server` process on loopback, behind two proxies: one in
// front of its Raft port (the other nodes reach it there: its -raft-advertise
// address and its entry in -peers), one in front of its client port.
type Node struct {
	ID       string
	SourceIP string // -raft-source: the IP its outgoing Raft connections come from
	Addr     string // its own gRPC listener (clients go through ClientProxy)
	HTTP     string // its HTTP listener (the harness asks it directly)
	Raft     string // its own Raft listener

	RaftProxy, ClientProxy *Proxy

	bin  string
	dir  string
	disk string // the tmpfs the data dir sits on (ClusterConfig.DiskSize), or ""
	args func() []string
	log  *os.File

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	stopped bool          // SIGSTOPped
}

// Cluster is a bootstrapped cluster of nodes and its network.
type Cluster struct {
	Nodes []*Node
	Net   *Net
	cfg   ClusterConfig
}

// StartCluster starts the nodes (each as its own process, each behind its
// proxies) and returns once every node runs; it does not wait for a leader
// (see Leader). On error, whatever started is stopped.
func StartCluster(ctx context.Context, cfg ClusterConfig, nw *Net) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.RaftTimeout == 0 {
		cfg.RaftTimeout = 100 * time.Millisecond
	}
	if cfg.SessionMargin == 0 {
		cfg.SessionMargin = 200 * time.Millisecond
	}
	c := &Cluster{Net: nw, cfg: cfg}
	var peers []string
	for i := range cfg.Nodes {
		n := &Node{ID: fmt.Sprintf("node-%d", i+1), SourceIP: fmt.Sprintf("127.0.0.%d", 11+i), bin: cfg.Bin,
			dir: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i+1))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		if cfg.DiskSize > 0 {
			if err := n.mountDisk(cfg.DiskSize); err != nil {
				c.Close()
				return nil, err
			}
		}
		var err error
		if n.RaftProxy, err = nw.NewProxy(n.ID, ""); err != nil {
			return nil, err
		}
		if n.ClientProxy, err = nw.NewProxy(n.ID, ""); err != nil {
			return nil, err
		}
		nw.Name(n.SourceIP, n.ID)
		peers = append(peers, n.ID+"="+n.RaftProxy.Addr())
	}
	for _, n := range c.Nodes {
		data := filepath.Join(n.dir, "data")
		if n.disk != "" {
			data = filepath.Join(n.disk, "data")
		}
		n.args = func() []string {
			args := []string{"server", "-id", n.ID, "-addr", n.Addr, "-http", n.HTTP, "-raft-addr", n.Raft,
				"-raft-advertise", n.RaftProxy.Addr(), "-raft-source", n.SourceIP,
				"-peers", strings.Join(peers, ","), "-data", data,
				"-raft-timeout", cfg.RaftTimeout.String(), "-session-margin", cfg.SessionMargin.String()}
			if cfg.LogSegmentSize > 0 {
				args = append(args, "-log-segment-size", strconv.Itoa(cfg.LogSegmentSize))
			}
			return args
		}
		var err error
		if n.log, err = os.OpenFile(filepath.Join(n.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			c.Close()
			return nil, err
		}
		for attempt := 0; ; attempt++ { // a free port may be taken before the server binds it
			if err = n.pickPorts(); err == nil {
				if err = n.start(ctx); err == nil {
					break
				}
			}
			if attempt == 4 || ctx.Err() != nil {
				c.Close()
				return nil, fmt.Errorf("chaos: start %s: %w", n.ID, err)
			}
		}
	}
	return c, nil
}

func (n *Node) pickPorts() error {
	var addrs [3]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs[i] = l.Addr().String()
		defer l.Close()
	}
	n.Addr, n.HTTP, n.Raft = addrs[0], addrs[1], addrs[2]
	n.ClientProxy.SetTarget(n.Addr)
	n.RaftProxy.SetTarget(n.Raft)
	return nil
}

// start runs the server and waits for its ready line.
func (n *Node) start(ctx context.Context) error {
	cmd := exec.Command(n.bin, n.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	var mu sync.Mutex
	var tail []string
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(n.log, "%.3f %s\n", float64(history.Now())/1e9, line)
			mu.Lock()
			tail = append(tail, line)
			if len(tail) > 20 {
				tail = tail[1:]
			}
			mu.Unlock()
			if !seen && strings.Contains(line, readyLine) {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(done)
	}()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-ready:
		n.mu.Lock()
		n.cmd, n.done, n.stopped = cmd, done, false
		n.mu.Unlock()
		return nil
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	<-done
	mu.Lock()
	defer mu.Unlock()
	out := tail
	for i, line := range out { // a panic's message, not its stacks
		if strings.HasPrefix(line, "goroutine ") {
			out = out[:i]
			break
		}
	}
	return fmt.Errorf("%s did not start (log: %s): %s", n.ID, n.log.Name(), strings.TrimSpace(strings.Join(out, " | ")))
}

// Running reports whether the process runs (neither killed nor stopped).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !n.stopped
}

// Kill sends SIGKILL (kill -9) and waits for the process to exit.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts the node again after Kill, on the same ports and data, and
// waits until it serves its ports.
func (n *Node) Restart(ctx context.Context) error {
	var err error
	for range 20 { // a port may linger briefly
		if err = n.start(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Stop sends SIGSTOP: the process freezes, its connections stay open.
func (n *Node) Stop() error { return n.signal(syscall.SIGSTOP, true) }

// Cont sends SIGCONT.
func (n *Node) Cont() error { return n.signal(syscall.SIGCONT, false) }

func (n *Node) signal(sig syscall.Signal, stopped bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("chaos: %s is not running", n.ID)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return err
	}
	n.stopped = stopped
	return nil
}

// ready asks the node's HTTP port whether it serves as leader.
func (n *Node) ready(ctx context.Context, hc *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTP+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

var errNoLeader = errors.New("chaos: no single leader")

// Leader waits until exactly one running node says it serves as leader
// (GET /readyz; the harness asks each node's own HTTP port, past the
// proxies) and returns it. Readiness lives inside the servers, which offer
// no event to wait on, so it polls.
func (c *Cluster) Leader(ctx context.Context, timeout time.Duration) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	for {
		var ready []*Node
		for _, n := range c.Nodes {
			if n.Running() && n.ready(ctx, hc) {
				ready = append(ready, n)
			}
		}
		if len(ready) == 1 {
			return ready[0], nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w within %s (%d nodes ready)", errNoLeader, timeout, len(ready))
		case <-t.C:
		}
	}
}

// status is what the harness reads of a node's GET /v1/status.
type status struct {
	Leader        bool   `json:"leader"`
	LeaderAddress string `json:"leader_address"`
	AppliedIndex  uint64 `json:"applied_index,string"`
}

// status asks the node's own HTTP port for its status.
func (n *Node) status(ctx context.Context, hc *http.Client) (status, error) {
	var st status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTP+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: GET /v1/status: %s", n.ID, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// AwaitHealthy waits until exactly one running node leads, every other
// running node follows it, and each has applied the log at least up to
// where the leader had applied it when it was first seen leading. It
// returns the leader and how long that took. A node restarted by a kill
// replays and fetches what it missed; until it has, the cluster is not
// healthy, and a fault then (say, the leader cut off while the restarted
// node still catches up) is a double fault that no recovery bound covers.
// Like Leader, it polls: the servers offer no event to wait on.
func (c *Cluster) AwaitHealthy(ctx context.Context, timeout time.Duration) (*Node, time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	var (
		leader *Node
		target uint64
	)
	for {
		sts := map[*Node]status{}
		lag := ""
		var leaders []*Node
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := n.status(ctx, hc)
			if err != nil {
				lag = err.Error()
				break
			}
			sts[n] = st
			if st.Leader {
				leaders = append(leaders, n)
			}
		}
		if lag == "" && len(leaders) != 1 {
			lag = fmt.Sprintf("%d nodes lead", len(leaders))
		}
		if lag == "" {
			if leaders[0] != leader {
				leader, target = leaders[0], sts[leaders[0]].AppliedIndex
			}
			for n, st := range sts {
				switch {
				case n == leader:
				case st.LeaderAddress == "":
					lag = fmt.Sprintf("%s follows no leader", n.ID)
				case st.AppliedIndex < target:
					lag = fmt.Sprintf("%s applied %d of %d", n.ID, st.AppliedIndex, target)
				}
			}
		}
		if lag == "" {
			return leader, time.Since(start), nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, time.Since(start), fmt.Errorf("chaos: cluster not healthy within %s: %s", timeout, lag)
		case <-t.C:
		}
	}
}

// ClientAddrs returns the client proxies' addresses, comma-separated, as
// dlmserver.Dial takes them.
func (c *Cluster) ClientAddrs() string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.ClientProxy.Addr())
	}
	return strings.Join(a, ",")
}

// AddrMap maps each node's own client address to its proxy: a follower
// names the leader's own address, and the clients' dialer goes to the proxy
// instead.
func (c *Cluster) AddrMap() map[string]string {
	m := map[string]string{}
	for _, n := range c.Nodes {
		m[n.Addr] = n.ClientProxy.Addr()
	}
	return m
}

// Close kills every node (resuming stopped ones first is not needed:
// SIGKILL ends a stopped process) and unmounts their disks.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
		if n.log != nil {
			n.log.Close()
		}
		if n.disk != "" {
			_ = syscall.Unmount(n.disk, syscall.MNT_DETACH)
		}
	}
}

// DumpStacks makes every running node print its goroutines to its log
// and exit (SIGQUIT, all at once, so that each dump shows the others'
// connections still open; a stopped node is resumed first), for a cluster
// that did not become healthy: what each node was waiting on is in its
// log.
func (c *Cluster) DumpStacks() {
	var dumping []*Node
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGCONT)
			_ = n.cmd.Process.Signal(syscall.SIGQUIT)
			dumping = append(dumping, n)
		}
		n.mu.Unlock()
	}
	for _, n := range dumping {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.cmd = nil
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// mountDisk mounts a tmpfs of size bytes for the node's data dir.
func (n *Node) mountDisk(size int64) error {
	disk := filepath.Join(n.dir, "disk")
	if err := os.MkdirAll(disk, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		return fmt.Errorf("chaos: mount a tmpfs for %s's data (this needs root): %w", n.ID, err)
	}
	n.disk = disk
	return nil
}

// FillDisk fills the node's disk (ClusterConfig.DiskSize) with a file
// until no byte more fits.
func (n *Node) FillDisk() error {
	if n.disk == "" {
		return fmt.Errorf("chaos: %s has no disk of its own to fill", n.ID)
	}
	return testenv.Fill(filepath.Join(n.disk, "filler"))
}

// FreeDisk removes what FillDisk wrote.
func (n *Node) FreeDisk() error { return os.Remove(filepath.Join(n.disk, "filler")) }

// StorageFailing asks the node's HTTP port whether its log's writes fail
// (its metric dlm_server_storage_failing).
func (n *Node) StorageFailing(ctx context.Context, hc *http.Client) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.HTTP+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "dlm_server_storage_failing "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("%s: /metrics has no dlm_server_storage_failing", n.ID)
}

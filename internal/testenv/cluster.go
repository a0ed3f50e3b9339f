package testenv

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a dlm server cluster: one `dlm server` process per node, on
// loopback ports, bootstrapped together with -peers.
type Cluster struct {
	Nodes []*DLM
	root  string // NewCluster: the nodes' directories, removed by Stop
}

// StartCluster starts an n-node cluster (each node with extra flags), waits
// until it has a leader, and kills every node at the end of the test. Raft
// timeouts are 100ms, for quick elections.
func StartCluster(t testing.TB, bin string, n int, extra ...string) *Cluster {
	t.Helper()
	c, err := newCluster(bin, n, t.TempDir, extra)
	if c != nil {
		t.Cleanup(c.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Leader(t, 20*time.Second)
	return c
}

// NewCluster is StartCluster outside a test (the comparison benchmarks):
// it returns once every node runs, without waiting for a leader (see
// AwaitLeader); Stop stops the nodes and removes their data. extra flags
// come after the defaults and override them (-raft-timeout among them).
func NewCluster(bin string, n int, extra ...string) (*Cluster, error) {
	root, err := os.MkdirTemp("", "dlm-cluster-")
	if err != nil {
		return nil, err
	}
	i := 0
	c, err := newCluster(bin, n, func() string {
		i++
		return filepath.Join(root, strconv.Itoa(i))
	}, extra)
	c.root = root
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// newCluster starts the nodes of an n-node cluster. A node can lose one of
// its ports to another process between freePort and its bind (the machine
// is shared); the cluster then starts again on new ports, in new
// directories, up to five times, since its peers know every node's
// address. Any other failure returns at once, with the nodes started
// before it, for the caller to stop.
func newCluster(bin string, n int, dir func() string, extra []string) (*Cluster, error) {
	var err error
	for range 5 {
		var c *Cluster
		c, err = startNodes(bin, n, dir, extra)
		if err == nil || !portLost(err) {
			return c, err
		}
		c.Stop()
	}
	return &Cluster{}, err
}

// portLost reports whether a server failed to start because another
// process took one of its ports first.
func portLost(err error) bool { return strings.Contains(err.Error(), "address already in use") }

// startNodes starts the nodes of an n-node cluster on ports free a moment
// ago.
func startNodes(bin string, n int, dir func() string, extra []string) (*Cluster, error) {
	c := &Cluster{}
	var peers []string
	ports := make([][3]int, n)
	for i := range n {
		for j := range ports[i] {
			p, err := freePort()
			if err != nil {
				return c, err
			}
			ports[i][j] = p
		}
		peers = append(peers, fmt.Sprintf("node-%d=127.0.0.1:%d", i+1, ports[i][2]))
	}
	for i := range n {
		d := &DLM{bin: bin, dir: dir(), ready: "dlm server: started"}
		d.addr = "127.0.0.1:" + strconv.Itoa(ports[i][0])
		d.http = "127.0.0.1:" + strconv.Itoa(ports[i][1])
		d.raft = "127.0.0.1:" + strconv.Itoa(ports[i][2])
		d.args = append([]string{"server", "-id", fmt.Sprintf("node-%d", i+1),
			"-addr", d.addr, "-http", d.http, "-raft-addr", d.raft, "-peers", strings.Join(peers, ","),
			"-data", filepath.Join(d.dir, "data"), "-raft-timeout", "100ms"}, extra...)
		if err := d.start(); err != nil {
			return c, fmt.Errorf("testenv: cluster node %d: %w", i+1, err)
		}
		c.Nodes = append(c.Nodes, d)
	}
	return c, nil
}

// Stop kills every node; for a cluster made by NewCluster, it also removes
// their data.
func (c *Cluster) Stop() {
	for _, d := range c.Nodes {
		d.Kill()
	}
	if c.root != "" {
		os.RemoveAll(c.root)
	}
}

// AwaitLeader waits up to timeout until exactly one running node reports
// that it serves (GET /readyz), and returns it.
func (c *Cluster) AwaitLeader(timeout time.Duration) (*DLM, error) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		var ready []*DLM
		for _, d := range c.Nodes {
			if !d.Running() {
				continue
			}
			resp, err := client.Get("http://" + d.HTTPAddr() + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = append(ready, d)
				}
			}
		}
		if len(ready) == 1 {
			return ready[0], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("testenv: no single leader within %s (%d nodes ready)", timeout, len(ready))
		}
		time.Sleep(20 * time.Millisecond) // readiness offers no event to wait on
	}
}

// Addrs returns the nodes' client addresses, comma-separated, as
// dlmserver.Dial and dlm:// URLs take them.
func (c *Cluster) Addrs() string {
	addrs := make([]string, len(c.Nodes))
	for i, d := range c.Nodes {
		addrs[i] = d.Addr()
	}
	return strings.Join(addrs, ",")
}

// Leader waits up to timeout until exactly one running node reports that it
// serves (GET /readyz), and returns it. Readiness lives inside the servers,
// which offer no event to wait on, so it polls.
func (c *Cluster) Leader(t testing.TB, timeout time.Duration) *DLM {
	t.Helper()
	d, err := c.AwaitLeader(timeout)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Join starts one more node that joins the cluster through its members'
// HTTP addresses (dlm server -join), waits until it has joined, and kills
// it at the end of the test.
func (c *Cluster) Join(t testing.TB, bin string, extra ...string) *DLM {
	t.Helper()
	var https []string
	for _, n := range c.Nodes {
		https = append(https, n.HTTPAddr())
	}
	id := fmt.Sprintf("node-%d", len(c.Nodes)+1)
	var d *DLM
	var err error
	for range 5 { // a port lost to another process: new ports (see newCluster)
		d = &DLM{bin: bin, dir: t.TempDir(), ready: "dlm server: joined the cluster"}
		d.addr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		d.http = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		d.raft = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		d.args = append([]string{"server", "-id", id, "-addr", d.addr, "-http", d.http, "-raft-addr", d.raft,
			"-join", strings.Join(https, ","), "-data", filepath.Join(d.dir, "data"), "-raft-timeout", "100ms"}, extra...)
		if err = d.start(); err == nil || !portLost(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: joining node %s: %v", id, err)
	}
	t.Cleanup(d.Kill)
	c.Nodes = append(c.Nodes, d)
	return d
}

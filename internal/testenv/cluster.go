package testenv

import (
	"fmt"
	"net/http"
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
}

// StartCluster starts an n-node cluster (each node with extra flags), waits
// until it has a leader, and kills every node at the end of the test. Raft
// timeouts are 100ms, for quick elections.
func StartCluster(t testing.TB, bin string, n int, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{}
	var peers []string
	ports := make([][3]int, n)
	for i := range n {
		for j := range ports[i] {
			ports[i][j] = FreePort(t)
		}
		peers = append(peers, fmt.Sprintf("node-%d=127.0.0.1:%d", i+1, ports[i][2]))
	}
	for i := range n {
		d := &DLM{bin: bin, dir: t.TempDir(), ready: "dlm server: started"}
		d.addr = "127.0.0.1:" + strconv.Itoa(ports[i][0])
		d.http = "127.0.0.1:" + strconv.Itoa(ports[i][1])
		d.raft = "127.0.0.1:" + strconv.Itoa(ports[i][2])
		d.args = append([]string{"server", "-id", fmt.Sprintf("node-%d", i+1),
			"-addr", d.addr, "-http", d.http, "-raft-addr", d.raft, "-peers", strings.Join(peers, ","),
			"-data", filepath.Join(d.dir, "data"), "-raft-timeout", "100ms"}, extra...)
		if err := d.start(); err != nil {
			t.Fatalf("testenv: cluster node %d: %v", i+1, err)
		}
		t.Cleanup(d.Kill)
		c.Nodes = append(c.Nodes, d)
	}
	c.Leader(t, 20*time.Second)
	return c
}

// Addrs returns the nodes' client addresses, comma-separated, as
// remote.Dial and dlm:// URLs take them.
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
			return ready[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: no single leader within %s (%d nodes ready)", timeout, len(ready))
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	d := &DLM{bin: bin, dir: t.TempDir(), ready: "dlm server: joined the cluster"}
	d.addr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
	d.http = "127.0.0.1:" + strconv.Itoa(FreePort(t))
	d.raft = "127.0.0.1:" + strconv.Itoa(FreePort(t))
	d.args = append([]string{"server", "-id", id, "-addr", d.addr, "-http", d.http, "-raft-addr", d.raft,
		"-join", strings.Join(https, ","), "-data", filepath.Join(d.dir, "data"), "-raft-timeout", "100ms"}, extra...)
	if err := d.start(); err != nil {
		t.Fatalf("testenv: joining node %s: %v", id, err)
	}
	t.Cleanup(d.Kill)
	c.Nodes = append(c.Nodes, d)
	return d
}

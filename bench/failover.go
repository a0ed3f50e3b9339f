package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Leader fail-over (-failover N): on each store, a leader and a queued
// candidate run as two `dlm elect` processes; the leader is killed with
// SIGKILL, and the time from the kill to the candidate saying it was elected
// is measured, N times per store. The leadership's TTL (the session TTL on
// the dlm server) is failoverTTL, the shortest etcd accepts.

// failoverTTL is the TTL of the measured leaderships.
const failoverTTL = 2 * time.Second

// failoverQueue is how long the second candidate is given to queue before
// the leader is killed.
const failoverQueue = 300 * time.Millisecond

// failover is the measurement on one store.
type failover struct {
	Store  string        `json:"store"`
	Trials int           `json:"trials"`
	P50    time.Duration `json:"p50_ns"`
	Max    time.Duration `json:"max_ns"`
	Err    string        `json:"error,omitempty"`
}

// measureFailover measures the fail-over on every store that runs.
func measureFailover(ctx context.Context, trials int, srv *servers) []failover {
	if trials <= 0 || srv.bin == "" {
		return nil
	}
	ttl := failoverTTL.String()
	var stores []struct{ name, url string }
	add := func(name, url string) { stores = append(stores, struct{ name, url string }{name, url}) }
	if srv.dlm1 != nil {
		add("dlm server, 1 node, durable", "dlm://"+srv.dlm1.Addr()+"?session_ttl="+ttl)
	}
	if srv.dlm3 != nil {
		add("dlm server, 3 nodes, durable", "dlm://"+srv.dlm3.Addrs()+"?session_ttl="+ttl)
	}
	if len(srv.redis) > 0 {
		add("redis", "redis://"+srv.redis[0].Addr())
		addrs, _ := srv.redisAddrs(redisNodes)
		add("redlock, 5 nodes", "redlock://"+strings.Join(addrs, ","))
	}
	if srv.postgres != nil {
		add("postgres", srv.postgres.DSN())
	}
	if srv.etcd != nil {
		add("etcd", "etcd://"+strings.TrimPrefix(srv.etcd.Endpoint(), "http://"))
	}
	var out []failover
	for _, s := range stores {
		f := failover{Store: s.name}
		var times []time.Duration
		for i := range trials {
			d, err := failoverOnce(ctx, srv.bin, s.url, fmt.Sprintf("bench/failover/%d/%d", time.Now().UnixNano(), i))
			if err != nil {
				f.Err = err.Error()
				break
			}
			times = append(times, d)
		}
		if len(times) > 0 {
			slices.Sort(times)
			f.Trials, f.P50, f.Max = len(times), times[len(times)/2], times[len(times)-1]
		}
		out = append(out, f)
	}
	return out
}

// failoverOnce elects a leader, queues a second candidate, kills the
// leader and returns the time until the second is elected.
func failoverOnce(ctx context.Context, bin, url, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := candidate(ctx, bin, url, name, "a")
	if err != nil {
		return 0, err
	}
	defer a.stop()
	if _, err := a.elected(); err != nil {
		return 0, fmt.Errorf("the first candidate: %w", err)
	}
	b, err := candidate(ctx, bin, url, name, "b")
	if err != nil {
		return 0, err
	}
	defer b.stop()
	t := time.NewTimer(failoverQueue)
	select {
	case <-ctx.Done():
		t.Stop()
		return 0, ctx.Err()
	case <-t.C:
	}
	killed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	if _, err := b.elected(); err != nil {
		return 0, fmt.Errorf("the second candidate: %w", err)
	}
	return time.Since(killed), nil
}

// elector is one `dlm elect` process holding a leadership.
type elector struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// candidate starts `dlm elect` for name with value.
func candidate(ctx context.Context, bin, url, name, value string) (*elector, error) {
	cmd := exec.CommandContext(ctx, bin, "elect", "--store", url, "--ttl", failoverTTL.String(), name, value)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &elector{cmd: cmd, lines: bufio.NewScanner(out)}, nil
}

// elected waits for the line that says the candidate leads: its term.
func (e *elector) elected() (string, error) {
	if !e.lines.Scan() {
		return "", fmt.Errorf("dlm elect ended without being elected: %v", e.lines.Err())
	}
	return strings.TrimSpace(e.lines.Text()), nil
}

// stop ends the process and reaps it.
func (e *elector) stop() {
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	_ = e.cmd.Wait()
}

// failoverSection writes the fail-over table.
func (rep *report) failoverSection(p func(string, ...any)) {
	if len(rep.Failover) == 0 {
		return
	}
	p("\n## Leader fail-over\n\n")
	p("A leader and a queued candidate as two `dlm elect` processes with a %s TTL (the session TTL on the dlm server); the leader gets SIGKILL, and the time from the kill to the candidate being elected is measured (`-failover N`, N trials per store). ", failoverTTL)
	p("It is the TTL where the store must wait for a lock to expire, and a round trip where it sees the holder die (PostgreSQL drops the dead connection's locks).\n\n")
	p("| store | trials | p50 | max |\n|---|--:|--:|--:|\n")
	for _, f := range rep.Failover {
		if f.Err != "" && f.Trials == 0 {
			p("| %s | failed: %s | | |\n", f.Store, f.Err)
			continue
		}
		p("| %s | %d | %s | %s |\n", f.Store, f.Trials, dur(f.P50), dur(f.Max))
	}
}

package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// serverArgs are the flags of a `dlm server` on free loopback ports with
// its data in dir.
func serverArgs(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }
	return append([]string{"server", "-addr", port(), "-http", port(), "-raft-addr", port(),
		"-data", dir, "-raft-timeout", "100ms"}, extra...)
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestServerDataDirInUse: a second dlm server on a data dir in use exits
// at once with one line naming the dir and the first server's pid (exit
// 75, as for a lock held by another); after the first is killed with
// SIGKILL, a new server starts on the dir: no stale lock.
func TestServerDataDirInUse(t *testing.T) {
	bin := dlmBin(t)
	dir := filepath.Join(t.TempDir(), "data")
	first := testenv.StartDLM(t, bin, "-data", dir)

	second := startDLM(t, nil, serverArgs(t, dir)...)
	code := second.wait(t, 20*time.Second)
	stderr := second.stderr.String()
	if code != exitBusy {
		t.Errorf("second server: exit %d, want %d; stderr:\n%s", code, exitBusy, stderr)
	}
	want := fmt.Sprintf("dlm server: data dir %s is in use by another dlm server (pid %d)", dir, first.PID())
	if got := lines(stderr); len(got) != 1 || got[0] != want {
		t.Errorf("second server's stderr:\n%s\nwant the one line:\n%s", stderr, want)
	}

	first.Kill()
	if err := first.Restart(); err != nil {
		t.Fatalf("no server starts on the data dir of a killed one: %v", err)
	}
}

// TestServerJoinStopsOnSignal: a server that waits to join a cluster
// through a member that never answers ends on SIGTERM with one line and
// exit 128+15.
func TestServerJoinStopsOnSignal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() { // accepts the join call and never reads it
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()

	p := startDLM(t, nil, serverArgs(t, t.TempDir(), "-join", ln.Addr().String())...)
	select {
	case c := <-accepted:
		defer c.Close()
	case <-p.done:
		t.Fatalf("exited (%d) before joining:\n%s", p.code, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("no join call within 20s:\n%s", p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectSignalStop(t, p, syscall.SIGTERM, "while joining the cluster via "+ln.Addr().String())
}

// TestServerWithoutQuorumStopsOnSignal: a server of a cluster whose other
// voter is down waits for a leader; Ctrl-C (SIGINT) ends it with one line
// and exit 128+2.
func TestServerWithoutQuorumStopsOnSignal(t *testing.T) {
	raftAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	down := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // nothing listens there
	p := startDLM(t, nil, append(serverArgs(t, t.TempDir()), "-raft-addr", raftAddr,
		"-peers", "node-1="+raftAddr+",node-2="+down)...)
	waitStderr(t, p, "dlm server: started")
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	expectSignalStop(t, p, syscall.SIGINT, "while waiting for a leader")
}

// waitStderr waits up to 20 s for want in p's stderr.
func waitStderr(t *testing.T, p *proc, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(p.stderr.String(), want) {
		select {
		case <-p.done:
			t.Fatalf("exited (%d) without %q:\n%s", p.code, want, p.stderr)
		case <-deadline:
			t.Fatalf("no %q within 20s:\n%s", want, p.stderr)
		case <-tick.C:
		}
	}
}

// expectSignalStop asserts that p exits within 20 s with 128+sig and one
// line saying it was stopped by sig and what it was waiting for.
func expectSignalStop(t *testing.T, p *proc, sig syscall.Signal, waiting string) {
	t.Helper()
	code := p.wait(t, 20*time.Second)
	stderr := p.stderr.String()
	if code != exitSignalBase+int(sig) {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitSignalBase+int(sig), stderr)
	}
	want := "dlm server: stopped by signal " + sig.String() + " " + waiting
	var found []string
	for _, l := range lines(stderr) {
		if strings.Contains(l, "stopped") || strings.Contains(l, "shutting down") {
			found = append(found, l)
		}
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], want) {
		t.Errorf("stderr:\n%s\nwant one line beginning %q", stderr, want)
	}
}

package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Etcd is a single-member etcd server in a temporary directory on loopback
// ports.
type Etcd struct {
	bin        string
	dir        string
	clientPort int
	peerPort   int

	mu   sync.Mutex
	proc *process
}

// StartEtcd starts an etcd server for the test and stops it at the end.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	e, err := NewEtcd()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

// NewEtcd starts an etcd server; the caller must Stop it.
func NewEtcd() (*Etcd, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("etcd not found; install it (apt-get install etcd-server) or run the README's test command, which does")
	}
	dir, err := os.MkdirTemp("", "dlm-etcd-")
	if err != nil {
		return nil, err
	}
	e := &Etcd{bin: bin, dir: dir}
	for range 5 {
		if e.clientPort, err = freePort(); err != nil {
			break
		}
		if e.peerPort, err = freePort(); err != nil {
			break
		}
		if err = e.start(); err == nil {
			return e, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("etcd: %w", err)
}

func (e *Etcd) start() error {
	peer := "http://127.0.0.1:" + strconv.Itoa(e.peerPort)
	cmd := exec.Command(e.bin,
		"--name", "n1", "--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", e.Endpoint(), "--advertise-client-urls", e.Endpoint(),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "n1="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr")
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH="+etcdArch())
	proc, err := startProcess(cmd, "serving client traffic", 30*time.Second)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.proc = proc
	e.mu.Unlock()
	return nil
}

// Endpoint returns the client URL, http://127.0.0.1:port.
func (e *Etcd) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(e.clientPort) }

// Kill stops the server with SIGKILL and waits for it to exit.
func (e *Etcd) Kill() {
	e.mu.Lock()
	proc := e.proc
	e.proc = nil
	e.mu.Unlock()
	if proc != nil {
		proc.kill()
	}
}

// Restart starts the server again on the same ports and data after Kill.
func (e *Etcd) Restart() error {
	var err error
	for range 20 {
		if err = e.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes its files.
func (e *Etcd) Stop() {
	e.Kill()
	os.RemoveAll(e.dir)
}

// etcdArch is the value etcd wants in ETCD_UNSUPPORTED_ARCH on platforms it
// does not support officially; it is ignored on amd64.
func etcdArch() string { return runtimeArch }

// PID returns the server's process id, 0 while it is killed.
func (e *Etcd) PID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc.pid()
}

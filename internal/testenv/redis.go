package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Redis is a redis-server process on a loopback port, without persistence.
type Redis struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu   sync.Mutex
	proc *process // nil while killed
}

// StartRedis starts a redis-server for the test and stops it at the end.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: need(t, "redis-server", "redis-server"), dir: t.TempDir()}
	var err error
	for range 5 {
		r.port = FreePort(t)
		if err = r.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: redis-server: %v", err)
	}
	t.Cleanup(r.Kill)
	return r
}

// NewRedis is StartRedis outside a test (the comparison benchmarks): Stop
// stops it and removes its directory.
func NewRedis() (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("testenv: redis-server is not installed (Debian package redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "dlm-redis-")
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir}
	for range 5 {
		if r.port, err = freePort(); err != nil {
			break
		}
		if err = r.start(); err == nil {
			return r, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("testenv: redis-server: %w", err)
}

// Stop kills a server made by NewRedis and removes its directory.
func (r *Redis) Stop() {
	r.Kill()
	os.RemoveAll(r.dir)
}

// PID returns the server's process id, 0 while it is killed.
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc.pid()
}

// Addr returns the server's host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *Redis) start() error {
	cmd := exec.Command(r.bin,
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir,
		"--daemonize", "no", "--loglevel", "notice", "--logfile", "")
	p, err := startProcess(cmd, "Ready to accept connections", 10*time.Second)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.proc = p
	r.mu.Unlock()
	return nil
}

// Kill stops the server with SIGKILL and waits for it to exit. Its data is
// gone: it runs without persistence.
func (r *Redis) Kill() {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Restart starts the server again on the same port after Kill, empty. It
// is for servers started by StartRedis.
func (r *Redis) Restart() {
	r.t.Helper()
	var err error
	for range 20 { // the port may linger briefly after the kill
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("testenv: restart redis-server on port %d: %v", r.port, err)
}

// String describes the server for test logs.
func (r *Redis) String() string { return fmt.Sprintf("redis-server at %s", r.Addr()) }

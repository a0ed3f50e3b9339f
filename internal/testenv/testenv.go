// Package testenv starts real servers for tests (redis-server now; postgres,
// etcd and dlm servers later) on free loopback ports in temporary
// directories, and stops them when the test ends. Nothing here relies on a
// pre-started service or a fixed port.
package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago, and that
// no earlier call in this process returned. A server started on it may
// still lose a race for it; callers retry on a new port.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return port
}

// handedOut holds the ports freePort returned: the kernel readily gives a
// port that was just closed to the next bind, so that the ports of one
// cluster (asked for one after the other, each closed at once) could
// otherwise coincide.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("no free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port: the kernel keeps giving ports handed out before")
}

// need returns the path of a server binary or fails the test with the
// command that installs it.
func need(t testing.TB, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("testenv: %s not found; install it (apt-get install %s) or run the README's test command, which does", bin, pkg)
	}
	return p
}

// process is a started server whose output is scanned for a ready line.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	tail []string // the last lines of output, for failure messages
}

// pid returns the process id, 0 for a nil process (one killed).
func (p *process) pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// startProcess runs cmd and waits until a line of its output contains ready,
// or the process exits, or timeout passes.
func startProcess(cmd *exec.Cmd, ready string, timeout time.Duration) (*process, error) {
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	readyc := make(chan struct{})
	scanned := make(chan struct{}) // closed when every line is in tail
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			if !seen && strings.Contains(line, ready) {
				seen = true
				close(readyc)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		// The scanner may hold the last lines read but not yet in
		// tail: a failure message must have them.
		<-scanned
		close(p.done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-readyc:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("exited before it was ready:\n%s", p.output())
	case <-t.C:
		p.kill()
		return nil, fmt.Errorf("not ready after %s:\n%s", timeout, p.output())
	}
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill sends SIGKILL and waits for the process to exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// SilentAddr returns the loopback address of a listener that accepts
// connections and never reads from them nor answers: a server that is up
// but does not respond. It closes, with its connections, at the end of the
// test.
func SilentAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

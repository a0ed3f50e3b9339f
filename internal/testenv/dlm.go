package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildDLM builds the dlm command (with -race if this binary has it) into a
// new temporary directory and
// returns the binary's path and a function that removes it. Call it once
// per test binary (in TestMain) and pass the path to StartDLM.
func BuildDLM() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "dlm-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "dlm")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	// Built inside dlm's own module, with its own dependencies, also when
	// called from another module (the comparison benchmarks).
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/dlmhq/dlm").Output()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("testenv: find dlm's module: %w", err)
	}
	cmd := exec.Command("go", append(args, "./cmd/dlm")...)
	cmd.Dir = strings.TrimSpace(string(root))
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("testenv: build dlm: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// DLM is a `dlm server` process on loopback ports, with its data in a
// temporary directory that survives restarts.
type DLM struct {
	bin              string
	dir              string
	args             []string
	addr, http, raft string
	ownDir           bool   // NewDLM: Stop removes dir
	ready            string // the log line that says it serves

	mu   sync.Mutex
	proc *process // nil while stopped
}

// StartDLM starts `dlm server` (built by BuildDLM) on free loopback ports,
// with extra flags appended, waits until it serves as leader, and kills it
// at the end of the test. Raft timeouts are 100ms, for quick elections.
func StartDLM(t testing.TB, bin string, extra ...string) *DLM {
	t.Helper()
	d, err := newDLM(t.TempDir(), bin, extra)
	if err != nil {
		t.Fatalf("testenv: dlm server: %v", err)
	}
	t.Cleanup(d.Kill)
	return d
}

// NewDLM is StartDLM for a server shared by a test binary's tests (see
// storetest.Main): Stop stops it and removes its data.
func NewDLM(bin string, extra ...string) (*DLM, error) {
	dir, err := os.MkdirTemp("", "dlm-data-")
	if err != nil {
		return nil, err
	}
	d, err := newDLM(dir, bin, extra)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.ownDir = true
	return d, nil
}

func newDLM(dir, bin string, extra []string) (*DLM, error) {
	d := &DLM{bin: bin, dir: dir, ready: "serving as leader"}
	var err error
	for range 5 {
		var ports [3]int
		for i := range ports {
			if ports[i], err = freePort(); err != nil {
				return nil, err
			}
		}
		d.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
		d.http = "127.0.0.1:" + strconv.Itoa(ports[1])
		d.raft = "127.0.0.1:" + strconv.Itoa(ports[2])
		d.args = append([]string{"server", "-addr", d.addr, "-http", d.http, "-raft-addr", d.raft,
			"-data", filepath.Join(d.dir, "data"), "-raft-timeout", "100ms"}, extra...)
		if err = d.start(); err == nil {
			return d, nil
		}
	}
	return nil, err
}

func (d *DLM) start() error {
	p, err := startProcess(exec.Command(d.bin, d.args...), d.ready, 20*time.Second)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.proc = p
	d.mu.Unlock()
	return nil
}

// Addr returns the gRPC address.
func (d *DLM) Addr() string { return d.addr }

// HTTPAddr returns the HTTP address.
func (d *DLM) HTTPAddr() string { return d.http }

// PID returns the server process's id, or 0 while it is stopped.
func (d *DLM) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc.pid()
}

// Running reports whether the server process runs (not killed or stopped).
func (d *DLM) Running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc != nil
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (d *DLM) Kill() { d.halt(syscall.SIGKILL) }

// Stop stops the server with SIGTERM (a graceful shutdown) and waits. For a
// server from NewDLM it also removes the data.
func (d *DLM) Stop() {
	d.halt(syscall.SIGTERM)
	if d.ownDir {
		os.RemoveAll(d.dir)
	}
}

func (d *DLM) halt(sig syscall.Signal) {
	d.mu.Lock()
	p := d.proc
	d.proc = nil
	d.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Signal(sig)
		<-p.done
	}
}

// Restart starts the server again with the same ports and data directory,
// after Kill or Stop, and waits until it serves.
func (d *DLM) Restart() error {
	var err error
	for range 20 { // a port may linger briefly
		if err = d.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("testenv: restart dlm server: %w", err)
}

// String describes the server for test logs.
func (d *DLM) String() string { return fmt.Sprintf("dlm server at %s", d.addr) }

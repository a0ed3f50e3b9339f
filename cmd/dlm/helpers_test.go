package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// The dlm binary and a dlm server shared by this package's tests, made on
// first use.
var (
	buildOnce   sync.Once
	builtBin    string
	buildErr    error
	cleanBuild  = func() {}
	serverOnce  sync.Once
	shared      *testenv.DLM
	sharedErr   error
	stopServers = func() {}
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopServers()
	cleanBuild()
	os.Exit(code)
}

// dlmBin returns the path of the dlm command built for these tests.
func dlmBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { builtBin, cleanBuild, buildErr = testenv.BuildDLM() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// sharedServer returns the address of a dlm server (in-memory log) shared
// by the package's tests.
func sharedServer(t testing.TB) string {
	t.Helper()
	bin := dlmBin(t)
	serverOnce.Do(func() {
		shared, sharedErr = testenv.NewDLM(bin, "-in-memory")
		if sharedErr == nil {
			stopServers = shared.Stop
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared.Addr()
}

// proc is a dlm command run by a test.
type proc struct {
	cmd    *exec.Cmd
	stdout *lineReader
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// startDLM starts the dlm binary with args; it is killed at the end of the
// test if still running.
func startDLM(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(dlmBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.stdout = newLineReader(out)
	go func() {
		defer close(p.done)
		<-p.stdout.eof
		cmd.Wait()
		p.code = cmd.ProcessState.ExitCode() // -1 if killed by a signal
	}()
	t.Cleanup(func() {
		// SIGTERM first: dlm run passes it to its command's process group,
		// which SIGKILL of dlm run alone would leave running.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit within d and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("dlm %s still running after %s; stderr:\n%s", strings.Join(p.cmd.Args[1:], " "), d, p.stderr)
		return 0
	}
}

// runDLM runs the dlm binary to the end and returns its exit code, stdout
// and stderr.
func runDLM(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dlmBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("dlm %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// lineReader delivers a process's output lines as they come.
type lineReader struct {
	lines chan string
	eof   chan struct{}
	mu    sync.Mutex
	all   []string
}

func newLineReader(r io.Reader) *lineReader {
	l := &lineReader{lines: make(chan string, 1024), eof: make(chan struct{})}
	go func() {
		defer close(l.eof)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			select {
			case l.lines <- sc.Text():
			default:
			}
		}
	}()
	return l
}

// expect waits up to d for a line containing want, and returns it.
func (l *lineReader) expect(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(line, want) {
				return line
			}
		case <-l.eof:
			t.Fatalf("output ended without %q; got:\n%s", want, l.String())
		case <-timer.C:
			t.Fatalf("no %q within %s; got:\n%s", want, d, l.String())
		}
	}
}

func (l *lineReader) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// storeFlag is the --store flag for a dlm server address.
func storeFlag(addr string, params ...string) string {
	s := fmt.Sprintf("--store=dlm://%s", addr)
	if len(params) > 0 {
		s += "?" + strings.Join(params, "&")
	}
	return s
}

// dlmAndRedis are the stores the end-to-end tests of run and ls run
// against, by name: each returns the --store flag of a running store.
var dlmAndRedis = map[string]func(t *testing.T) string{
	"dlm":   func(t *testing.T) string { return storeFlag(sharedServer(t)) },
	"redis": func(t *testing.T) string { return "--store=redis://" + testenv.StartRedis(t).Addr() },
}

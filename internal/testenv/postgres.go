package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server in a temporary directory on a loopback
// port, with trust authentication for the user "postgres" and fsync off.
type Postgres struct {
	bin  string // the directory of initdb and postgres
	base string // removed by Stop
	data string
	port int
	cred *syscall.Credential // set when running as root: postgres refuses root

	mu   sync.Mutex
	proc *process
}

// StartPostgres starts a PostgreSQL server for the test and stops it at the
// end. initdb takes a second or two: share one server per package where the
// tests allow it (NewPostgres in TestMain).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := NewPostgres()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// NewPostgres initialises and starts a PostgreSQL server; the caller must
// Stop it.
func NewPostgres() (*Postgres, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "dlm-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin, base: base, data: filepath.Join(base, "data")}
	if err := p.prepare(); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	for range 5 {
		if p.port, err = freePort(); err != nil {
			break
		}
		if err = p.start(); err == nil {
			return p, nil
		}
	}
	os.RemoveAll(base)
	return nil, fmt.Errorf("postgres: %w", err)
}

// postgresBin finds initdb on PATH or in Debian's versioned directories.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	slices.Reverse(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("initdb not found; install it (apt-get install postgresql) or run the README's test command, which does")
}

// prepare runs initdb, as the postgres (or nobody) user when running as root.
func (p *Postgres) prepare() error {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return fmt.Errorf("running as root and no postgres or nobody user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(p.base, 0o755); err != nil {
			return err
		}
		if err := os.Chown(p.base, uid, gid); err != nil {
			return err
		}
	}
	cmd := p.command("initdb", "-D", p.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.base
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func (p *Postgres) start() error {
	cmd := p.command("postgres", "-D", p.data, "-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+p.base,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	proc, err := startProcess(cmd, "database system is ready to accept connections", 30*time.Second)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	return nil
}

// DSN returns a connection string for the database "postgres".
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Addr returns the server's host:port.
func (p *Postgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// Kill stops the server with SIGKILL and waits for it to exit.
func (p *Postgres) Kill() {
	p.mu.Lock()
	proc := p.proc
	p.proc = nil
	p.mu.Unlock()
	if proc != nil {
		proc.kill()
	}
}

// Restart starts the server again on the same port and data after Kill.
func (p *Postgres) Restart() error {
	var err error
	for range 20 {
		if err = p.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes its files.
func (p *Postgres) Stop() {
	p.Kill()
	os.RemoveAll(p.base)
}

// PID returns the server's process id, 0 while it is killed.
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc.pid()
}

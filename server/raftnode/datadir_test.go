package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"go.etcd.io/bbolt"
)

// openAsync opens a node in a goroutine and returns its result, or fails
// the test if Open has not returned within 20 s (a wait that would never
// end: Open must not wait for a data dir in use).
func openAsync(t *testing.T, cfg Config) (*Node, error) {
	t.Helper()
	type result struct {
		n   *Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := Open(cfg)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("Open(%s) still waiting after 20s", cfg.Dir)
		return nil, nil
	}
}

// TestOpenDataDirInUse: a second node on a data dir in use fails at once,
// naming the dir and the pid of its holder; once the first is closed, the
// dir opens.
func TestOpenDataDirInUse(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	dir := t.TempDir()
	first := openNode(t, Config{Dir: dir})

	second, err := openAsync(t, Config{Dir: dir, Raft: servertest.FastRaft})
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second node opened a data dir in use")
	}
	if !errors.Is(err, ErrDataDirInUse) {
		t.Errorf("err = %v, want ErrDataDirInUse", err)
	}
	var inUse *DataDirInUseError
	if !errors.As(err, &inUse) || inUse.Dir != dir || inUse.PID != os.Getpid() {
		t.Errorf("err = %#v, want a *DataDirInUseError for %s, pid %d", err, dir, os.Getpid())
	}
	want := fmt.Sprintf("data dir %s is in use by another dlm server (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want it to say %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	again := openNode(t, Config{Dir: dir})
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRaftLogLocked: a Raft log that another process holds (an
// earlier dlm without the LOCK file, a bbolt tool) fails Open within a
// bound instead of waiting for bbolt's file lock forever.
func TestOpenRaftLogLocked(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	dir := t.TempDir()
	db, err := bbolt.Open(filepath.Join(dir, "raft.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	n, err := openAsync(t, Config{Dir: dir, Raft: servertest.FastRaft})
	if err == nil {
		n.Close()
		t.Fatal("a node opened a Raft log held by another")
	}
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), dir) {
		t.Errorf("err = %v, want ErrDataDirInUse naming %s", err, dir)
	}
}

// TestDataDirLock: the LOCK file holds the pid of its holder while locked;
// a second lock fails with it; closing releases it.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	l, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "LOCK"))
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("LOCK holds %q (%v), want the pid %d", b, err, os.Getpid())
	}
	if l2, err := lockDataDir(dir); err == nil {
		l2.Close()
		t.Fatal("locked twice")
	} else if inUse := (*DataDirInUseError)(nil); !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second lock: %v, want in use by pid %d", err, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

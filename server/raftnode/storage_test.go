package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// faultSwitch fails the writes of one store while it holds an error.
type faultSwitch struct {
	store string
	err   atomic.Pointer[error]
}

func (f *faultSwitch) set(err error) { f.err.Store(&err) }

func (f *faultSwitch) fault(store, _ string) error {
	if p := f.err.Load(); p != nil && store == f.store {
		return *p
	}
	return nil
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// proposeUntil proposes cmd (a retry, with its request id) until it
// applies or ctx ends.
func proposeUntil(t *testing.T, ctx context.Context, n *Node, cmd *dlmpb.Command) fsm.Result {
	t.Helper()
	var rs []fsm.Result
	waitFor(t, ctx, "the proposal to apply", func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		rs, err = n.Propose(pctx, cmd)
		return err == nil
	})
	return rs[0]
}

// TestStorageFailureRefusesNamesTheCauseAndRecovers: while the log cannot
// be written (ENOSPC), a proposal fails with ErrStorage naming the cause,
// the node records the failure, its log stays bounded although Raft steps
// down and fails again over and over, and once writes succeed the node
// serves again with every acknowledged lock in place.
func TestStorageFailureRefusesNamesTheCauseAndRecovers(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	ctx := testCtx(t)
	var logs servertest.LogBuffer
	fs := &faultSwitch{store: StoreLog}
	n := openNode(t, Config{Dir: t.TempDir(), Logger: logs.Logger(), StorageFault: fs.fault})
	defer n.Close()
	sid := propose(t, n, servertest.Open("a"))[0].Session
	held := propose(t, n, servertest.Lock(sid, 1, "r1", dlmpb.Mode_MODE_EX))[0]

	fs.set(&os.PathError{Op: "write", Path: "00000000000000000001-0000000000000001.wal", Err: syscall.ENOSPC})
	_, err := n.Propose(ctx, servertest.Lock(sid, 2, "r2", dlmpb.Mode_MODE_EX))
	if !errors.Is(err, ErrStorage) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("propose on a full disk: %v, want ErrStorage naming the cause", err)
	}
	f, ok := n.StorageFailure()
	if !ok || f.Store != StoreLog || f.Cause() != "no space left on device" {
		t.Fatalf("StorageFailure() = %+v, %v", f, ok)
	}
	// Raft steps down, elects itself and fails again: many failures, few
	// lines.
	waitFor(t, ctx, "30 failed writes", func() bool { f, _ := n.StorageFailure(); return f.Count >= 30 })
	if lines := logs.Count("") - logs.Count("level=DEBUG"); lines > 60 {
		t.Fatalf("%d log lines after %d failed writes, want a bounded number:\n%s", lines, n.StorageFailures(), logs.String())
	}
	if c := logs.Count("storage write failed"); c != 1 {
		t.Fatalf("the failure is said %d times, want once", c)
	}

	fs.set(nil)
	second := proposeUntil(t, ctx, n, servertest.Lock(sid, 2, "r2", dlmpb.Mode_MODE_EX))
	if second.Status != locktable.StatusGranted {
		t.Fatalf("lock after recovery: %+v", second)
	}
	if f, ok := n.StorageFailure(); ok {
		t.Fatalf("StorageFailure() after recovery = %+v", f)
	}
	if !logs.Has("storage writes succeed again") {
		t.Fatal("the recovery is not logged")
	}
	n.FSM().Read(func(v fsm.View) {
		if info, ok := v.Table().Describe(held.Lock); !ok || info.Token != held.Token || info.State != locktable.LockGranted {
			t.Errorf("the lock acknowledged before the failure: %+v, %v", info, ok)
		}
	})
}

// TestFailedSnapshotLeavesNothingBehind: a snapshot whose write fails
// leaves no directory behind, and the next one, once writes succeed, is
// kept.
func TestFailedSnapshotLeavesNothingBehind(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	dir := t.TempDir()
	fs := &faultSwitch{store: StoreSnapshot}
	n := openNode(t, Config{Dir: dir, StorageFault: fs.fault})
	defer n.Close()
	propose(t, n, servertest.Open("a"))
	fs.set(&os.PathError{Op: "write", Path: "state.bin", Err: syscall.EIO})
	if err := n.raft.Snapshot().Error(); err == nil {
		t.Fatal("a snapshot on a failing disk succeeded")
	}
	if f, ok := n.StorageFailure(); !ok || f.Store != StoreSnapshot {
		t.Fatalf("StorageFailure() = %+v, %v", f, ok)
	}
	if left := snapshotDirs(t, dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	fs.set(nil)
	propose(t, n, servertest.Open("b"))
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if left := snapshotDirs(t, dir); len(left) != 1 || strings.HasSuffix(left[0], ".tmp") {
		t.Fatalf("snapshots: %v, want one", left)
	}
	if f, ok := n.StorageFailure(); ok {
		t.Fatalf("StorageFailure() after a snapshot succeeded = %+v", f)
	}
}

func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test where mounting is not allowed.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	if err := testenv.Fill(path); err != nil {
		t.Fatal(err)
	}
}

// TestFullTmpfsRefusesThenRecovers fills a real (tmpfs) disk under a
// durable node with small log segments: the node grants while its
// preallocated segment has room, then the next segment cannot be
// preallocated and proposals fail with ErrStorage, a failed snapshot
// leaves nothing behind, no half-made segment stays to block the next
// attempt, and once space returns the node grants again, every lock it
// acknowledged in place.
func TestFullTmpfsRefusesThenRecovers(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	root := mountTmpfs(t, 8<<20)
	dir := filepath.Join(root, "data")
	ctx := testCtx(t)
	n := openNode(t, Config{Dir: dir, LogSegmentSize: 256 << 10})
	defer n.Close()
	sid := propose(t, n, servertest.Open("a"))[0].Session
	fill(t, filepath.Join(root, "filler"))

	var acked []fsm.Result
	var failed error
	seq := uint64(0)
	for range 5000 {
		seq++
		cmd := servertest.WithMetadata(servertest.Lock(sid, seq, fmt.Sprintf("r%d", seq), dlmpb.Mode_MODE_EX), strings.Repeat("m", 1000))
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rs, err := n.Propose(pctx, cmd)
		cancel()
		if err != nil {
			failed = err
			break
		}
		acked = append(acked, rs[0])
	}
	if !errors.Is(failed, ErrStorage) || !strings.Contains(failed.Error(), "no space left on device") {
		t.Fatalf("after %d locks on a full disk: %v, want ErrStorage naming the cause", len(acked), failed)
	}
	if len(acked) == 0 {
		t.Fatal("nothing granted while the segment had room")
	}
	if err := n.raft.Snapshot().Error(); err == nil {
		t.Log("the snapshot fitted")
	}
	for _, name := range snapshotDirs(t, dir) {
		if strings.HasSuffix(name, ".tmp") {
			t.Fatalf("a failed snapshot left %s", name)
		}
	}

	if err := os.Remove(filepath.Join(root, "filler")); err != nil {
		t.Fatal(err)
	}
	seq++
	r := proposeUntil(t, ctx, n, servertest.Lock(sid, seq, "after", dlmpb.Mode_MODE_EX))
	if r.Status != locktable.StatusGranted {
		t.Fatalf("lock after space returned: %+v", r)
	}
	// A failed snapshot stays reported until a snapshot succeeds.
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("a snapshot once space returned: %v", err)
	}
	if f, ok := n.StorageFailure(); ok {
		t.Fatalf("StorageFailure() once space returned = %+v", f)
	}
	n.FSM().Read(func(v fsm.View) {
		for _, want := range acked {
			if info, ok := v.Table().Describe(want.Lock); !ok || info.Token != want.Token {
				t.Errorf("acknowledged lock %d: %+v, %v", want.Lock, info, ok)
			}
		}
	})
}

// TestLogSegmentSize: the wal log takes the segment size it is given
// within its bounds (a new segment file of that size), and a node asked
// for one out of them does not open, naming the bounds.
func TestLogSegmentSize(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	if DefaultLogSegmentSize != wal.DefaultSegmentSize {
		t.Fatalf("DefaultLogSegmentSize %d, raft-wal's default %d", DefaultLogSegmentSize, wal.DefaultSegmentSize)
	}
	for _, size := range []int{MinLogSegmentSize - 1, MaxLogSegmentSize + 1, -1} {
		n, err := Open(Config{Dir: t.TempDir(), LogSegmentSize: size})
		if err == nil {
			n.Close()
			t.Fatalf("LogSegmentSize %d: the node opened", size)
		}
		if !errors.Is(err, ErrLogSegmentSize) {
			t.Fatalf("LogSegmentSize %d: %v, want ErrLogSegmentSize", size, err)
		}
	}
	dir := t.TempDir()
	n := openNode(t, Config{Dir: dir, LogSegmentSize: MinLogSegmentSize})
	propose(t, n, servertest.Open("a"))
	n.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no segment")
	}
	for _, s := range segs {
		if fi, err := os.Stat(s); err != nil || fi.Size() != MinLogSegmentSize {
			t.Fatalf("segment %s: %v, %v; want %d bytes", s, fi.Size(), err, MinLogSegmentSize)
		}
	}
}

// TestSnapshotSoonAfterTheThreshold: a node snapshots within about two
// SnapshotIntervals of reaching the snapshot threshold (100 entries here),
// well within the test's 20 s, not raft's default of 2 to 4 minutes, which
// restarts with the node.
func TestSnapshotSoonAfterTheThreshold(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	dir := t.TempDir()
	n := openNode(t, Config{Dir: dir, Raft: func(rc *raft.Config) {
		servertest.FastRaft(rc)
		rc.SnapshotThreshold = 100
	}})
	defer n.Close()
	start := time.Now()
	for i := range 120 {
		propose(t, n, servertest.Open(fmt.Sprintf("s%d", i)))
	}
	ctx := testCtx(t)
	waitFor(t, ctx, "a snapshot", func() bool { return len(snapshotDirs(t, dir)) > 0 }) // 20 s
	t.Logf("the snapshot came %s after the first entry", time.Since(start).Round(time.Millisecond))
}

package server

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// applyEntry applies one log entry of cmds at index with the given stamp.
func applyEntry(t testing.TB, f *FSM, index uint64, stamp int64, cmds ...*dlmpb.Command) []Result {
	t.Helper()
	data, err := proto.Marshal(&dlmpb.Batch{Commands: cmds, StampUnixNano: stamp})
	if err != nil {
		t.Fatal(err)
	}
	resp := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
	rs, ok := resp.([]Result)
	if !ok {
		t.Fatalf("Apply(%d) = %v, want []Result", index, resp)
	}
	return rs
}

func openCmd(label string) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: label, TtlNanos: int64(10 * time.Second)}}}
}

func lockCmd(sid locktable.SessionID, seq uint64, res string, m dlmpb.Mode) *dlmpb.Command {
	return &dlmpb.Command{Seq: seq, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
		Session: uint64(sid), Owner: uint64(sid), Resource: res, Mode: m}}}
}

func convertCmd(sid locktable.SessionID, id locktable.LockID, m dlmpb.Mode) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Convert{Convert: &dlmpb.ConvertCmd{
		Session: uint64(sid), LockId: uint64(id), Mode: m}}}
}

func releaseCmd(sid locktable.SessionID, id locktable.LockID) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{
		Session: uint64(sid), LockId: uint64(id)}}}
}

func expireCmd(ids ...locktable.SessionID) *dlmpb.Command {
	e := &dlmpb.ExpireSessionsCmd{}
	for _, id := range ids {
		e.Sessions = append(e.Sessions, uint64(id))
	}
	return &dlmpb.Command{Op: &dlmpb.Command_ExpireSessions{ExpireSessions: e}}
}

func mustOK(t testing.TB, rs ...Result) {
	t.Helper()
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("result %d: %v", i, r.Err)
		}
	}
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (*memSink) ID() string      { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (*memSink) Close() error    { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

// fastRaft shortens Raft's timeouts so that a single node elects itself in
// tens of milliseconds.
func fastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// openNode opens a node and waits until it leads and has applied its log.
func openNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.Raft == nil {
		cfg.Raft = fastRaft
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		n.Close()
		t.Fatal(err)
	}
	if err := n.Barrier(ctx); err != nil {
		n.Close()
		t.Fatal(err)
	}
	return n
}

// checkNoLeaks fails if goroutines of raft, bbolt or this package outlive
// the test's nodes, after a grace period of up to 10 s.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded machine is slow to unwind
	for {
		leaked := leakedGoroutines()
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leakedGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "checkNoLeaks") || strings.Contains(g, "leakedGoroutines") {
			continue
		}
		if strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "go.etcd.io/bbolt") ||
			strings.Contains(g, "dlm/server.(*Node)") || strings.Contains(g, "dlm/server.(*Server)") {
			out = append(out, g)
		}
	}
	return out
}

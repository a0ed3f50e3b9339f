// Package servertest is what the tests of the server's layers (the state
// machine, the Raft node, auth and the service) share: one builder per
// command, so that a test says what it applies in one line; snapshots in
// memory; fast Raft timeouts; a log buffer; a goroutine-leak check; and a
// test PKI.
package servertest

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/devcert"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
)

// Open is an OpenSession command with label and a 10 s TTL.
func Open(label string) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: label, TtlNanos: int64(10 * time.Second)}}}
}

// Checkpoint records the silences of sessions, as pairs of a session and
// its silence (0: heard).
func Checkpoint(pairs ...any) *dlmpb.Command {
	c := &dlmpb.CheckpointSessionsCmd{}
	for i := 0; i+1 < len(pairs); i += 2 {
		c.Sessions = append(c.Sessions, &dlmpb.SessionSilence{
			Session: uint64(pairs[i].(locktable.SessionID)), SilentNanos: int64(pairs[i+1].(time.Duration))})
	}
	return &dlmpb.Command{Op: &dlmpb.Command_CheckpointSessions{CheckpointSessions: c}}
}

// RaiseTokens raises the fencing-token sequence above floor.
func RaiseTokens(floor uint64) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_RaiseTokens{RaiseTokens: &dlmpb.RaiseTokensCmd{Floor: floor}}}
}

// Lock is session sid's request seq for resource res in mode m.
func Lock(sid locktable.SessionID, seq uint64, res string, m dlmpb.Mode) *dlmpb.Command {
	return &dlmpb.Command{Seq: seq, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
		Session: uint64(sid), Owner: uint64(sid), Resource: res, Mode: m}}}
}

// Convert is session sid's conversion of lock id to mode m.
func Convert(sid locktable.SessionID, id locktable.LockID, m dlmpb.Mode) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Convert{Convert: &dlmpb.ConvertCmd{
		Session: uint64(sid), LockId: uint64(id), Mode: m}}}
}

// Release is session sid's release of lock id.
func Release(sid locktable.SessionID, id locktable.LockID) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{
		Session: uint64(sid), LockId: uint64(id)}}}
}

// Expire ends the sessions ids.
func Expire(ids ...locktable.SessionID) *dlmpb.Command {
	e := &dlmpb.ExpireSessionsCmd{}
	for _, id := range ids {
		e.Sessions = append(e.Sessions, uint64(id))
	}
	return &dlmpb.Command{Op: &dlmpb.Command_ExpireSessions{ExpireSessions: e}}
}

// WithWait sets the lock request c's wait, in nanoseconds.
func WithWait(c *dlmpb.Command, wait int64) *dlmpb.Command {
	c.GetLock().WaitNanos = &wait
	return c
}

// WithMetadata sets the lock request c's holder description.
func WithMetadata(c *dlmpb.Command, m string) *dlmpb.Command {
	c.GetLock().Metadata = []byte(m)
	return c
}

// Semaphore is session sid's request seq for permits of semaphore res.
func Semaphore(sid locktable.SessionID, seq uint64, res string, capacity, permits uint32) *dlmpb.Command {
	return &dlmpb.Command{Seq: seq, Op: &dlmpb.Command_Lock{Lock: &dlmpb.LockCmd{
		Session: uint64(sid), Owner: uint64(sid), Resource: res, Capacity: capacity, Permits: permits}}}
}

// Cancel is session sid's cancellation of what lock id awaits.
func Cancel(sid locktable.SessionID, seq uint64, id locktable.LockID) *dlmpb.Command {
	return &dlmpb.Command{Seq: seq, Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{Session: uint64(sid), LockId: uint64(id)}}}
}

// Relabel is session sid's request seq to set the metadata of lock id.
func Relabel(sid locktable.SessionID, seq uint64, id locktable.LockID, m string) *dlmpb.Command {
	return &dlmpb.Command{Seq: seq, Op: &dlmpb.Command_Relabel{Relabel: &dlmpb.RelabelCmd{
		Session: uint64(sid), LockId: uint64(id), Metadata: []byte(m)}}}
}

// SnapshotBytes returns what a snapshot of f persists.
func SnapshotBytes(t testing.TB, f raft.FSM) []byte {
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

// Member records the client and HTTP addresses of Raft member id.
func Member(id, client, http string) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_SetMember{SetMember: &dlmpb.SetMemberCmd{Id: id, ClientAddr: client, HttpAddr: http}}}
}

// Populate returns the three entries, for Raft indexes 1 to 3, that give an
// empty state machine one of everything the log can create: sessions 1 (a),
// 2 (b) and 3 (c); lock 1 (a, PR on r1, with a queued conversion to EX),
// lock 2 (b, PR on r1), lock 3 (c, EX on r1, queued with a deadline), lock 4
// (a, EX on r2, with metadata), lock 5 (b, 3 permits of semaphore pool,
// with metadata), lock 6 (c, 2 permits of pool, queued); and a member
// record. Entry i is stamped i+1 seconds.
func Populate() []*dlmpb.Batch {
	const sec = int64(time.Second)
	conv := Convert(1, 1, dlmpb.Mode_MODE_EX)
	conv.Seq = 3
	wait := 5 * sec
	conv.GetConvert().WaitNanos = &wait
	return []*dlmpb.Batch{
		{StampUnixNano: sec, Commands: []*dlmpb.Command{Open("a"), Open("b"), Open("c")}},
		{StampUnixNano: 2 * sec, Commands: []*dlmpb.Command{
			Lock(1, 1, "r1", dlmpb.Mode_MODE_PR),
			Lock(2, 1, "r1", dlmpb.Mode_MODE_PR),
			WithWait(Lock(3, 1, "r1", dlmpb.Mode_MODE_EX), 10*sec),
			WithMetadata(Lock(1, 2, "r2", dlmpb.Mode_MODE_EX), "a's"),
			WithMetadata(Semaphore(2, 2, "pool", 4, 3), "b's"),
			Semaphore(3, 2, "pool", 4, 2),
		}},
		{StampUnixNano: 3 * sec, Commands: []*dlmpb.Command{conv, Member("node-1", "127.0.0.1:7420", "127.0.0.1:7421")}},
	}
}

// FastRaft shortens Raft's timeouts so that a single node elects itself in
// tens of milliseconds.
func FastRaft(c *raft.Config) {
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// LogBuffer collects a server's logs, for tests that check what they say.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a debug-level logger writing to b.
func (b *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Count returns how many lines contain every one of parts.
func (r *LogBuffer) Count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for line := range strings.Lines(r.buf.String()) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// Has reports whether a line contains every one of parts.
func (r *LogBuffer) Has(parts ...string) bool { return r.Count(parts...) > 0 }

// CheckNoLeaks fails if goroutines of raft, bbolt, a Node or a Server outlive
// the test's nodes, after a grace period of up to 10 s.
func CheckNoLeaks(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded machine is slow to unwind
	for {
		stuck := leaked()
		if len(stuck) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines leaked:\n%s", len(stuck), strings.Join(stuck, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leaked() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "CheckNoLeaks") || strings.Contains(g, "leaked") {
			continue
		}
		if strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "go.etcd.io/bbolt") ||
			strings.Contains(g, "dlm/server/raftnode.(*Node)") || strings.Contains(g, "dlm/server.(*Server)") {
			out = append(out, g)
		}
	}
	return out
}

// PKI is a development CA and its certificates (internal/devcert, as
// `dlm certs` makes them) in a temporary directory.
type PKI struct {
	dir string
}

// NewPKI makes a CA, a server certificate for 127.0.0.1, node certificates
// node-1 to node-5 and client certificates for clients.
func NewPKI(t testing.TB, clients ...string) *PKI {
	t.Helper()
	dir := t.TempDir()
	_, err := devcert.Write(dir, devcert.WithHosts("127.0.0.1", "localhost"),
		devcert.WithNodes("node-1", "node-2", "node-3", "node-4", "node-5"), devcert.WithClients(clients...))
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{dir: dir}
}

// Path is the file name in the PKI's directory.
func (p *PKI) Path(name string) string { return filepath.Join(p.dir, name) }

// ServerTLS is the client ports' configuration; with mtls, client
// certificates of this CA are required.
func (p *PKI) ServerTLS(t testing.TB, mtls bool) *tls.Config {
	t.Helper()
	ca := ""
	if mtls {
		ca = p.Path(devcert.CAFile)
	}
	c, err := auth.LoadTLS(p.Path(devcert.ServerFile), p.Path(devcert.ServerKeyFile), ca)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RaftTLS is node id's Raft configuration.
func (p *PKI) RaftTLS(t testing.TB, id string) *tls.Config {
	t.Helper()
	cert, key := devcert.NodeFiles(id)
	c, err := auth.LoadRaftTLS(p.Path(cert), p.Path(key), p.Path(devcert.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientTLS trusts the CA and presents client's certificate ("" for none).
func (p *PKI) ClientTLS(t testing.TB, client string) *tls.Config {
	t.Helper()
	pool, err := auth.LoadCAPool(p.Path(devcert.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != "" {
		cert, key := devcert.ClientFiles(client)
		pair, err := tls.LoadX509KeyPair(p.Path(cert), p.Path(key))
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// SessionRequests are client requests of every kind with the values that
// matter: waits unset, zero, negative and out of range, modes unset and
// unknown, names empty and too long, metadata too long, capacity and mode
// together, sequences repeated and zero.
func SessionRequests() []*dlmpb.SessionRequest {
	lock := func(seq uint64, res string, m dlmpb.Mode, edit ...func(*dlmpb.LockRequest)) *dlmpb.SessionRequest {
		r := &dlmpb.LockRequest{Id: &dlmpb.RequestID{Seq: seq}, Resource: res, Mode: m, Owner: seq}
		for _, e := range edit {
			e(r)
		}
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: r}}
	}
	wait := func(d *durationpb.Duration) func(*dlmpb.LockRequest) {
		return func(r *dlmpb.LockRequest) { r.Wait = d }
	}
	conv := func(seq, id uint64, m dlmpb.Mode, w *durationpb.Duration) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
			Id: &dlmpb.RequestID{Seq: seq}, LockId: id, Mode: m, Wait: w}}}
	}
	return []*dlmpb.SessionRequest{
		lock(1, "r", dlmpb.Mode_MODE_EX),
		lock(2, "r", dlmpb.Mode_MODE_PR, wait(durationpb.New(0))),
		lock(3, "r1", dlmpb.Mode_MODE_EX, wait(durationpb.New(time.Second))),
		lock(4, "r", dlmpb.Mode_MODE_EX, wait(durationpb.New(-time.Second))),
		lock(5, "r", dlmpb.Mode_MODE_EX, wait(&durationpb.Duration{Seconds: math.MaxInt64})),
		lock(6, "r", dlmpb.Mode_MODE_EX, wait(&durationpb.Duration{Seconds: 315576000000})),
		lock(7, "r", dlmpb.Mode_MODE_EX, wait(&durationpb.Duration{Seconds: 1, Nanos: -1})),
		lock(8, "", dlmpb.Mode_MODE_EX),
		lock(9, string(make([]byte, 513)) /* one byte over the default longest name */, dlmpb.Mode_MODE_EX),
		lock(10, "r", dlmpb.Mode(99)),
		lock(11, "r", dlmpb.Mode_MODE_UNSPECIFIED),
		lock(12, "pool", dlmpb.Mode_MODE_UNSPECIFIED, func(r *dlmpb.LockRequest) { r.Capacity, r.Permits = 4, 1 }),
		lock(13, "pool", dlmpb.Mode_MODE_EX, func(r *dlmpb.LockRequest) { r.Capacity, r.Permits = 4, 1 }),
		lock(14, "sem", dlmpb.Mode_MODE_UNSPECIFIED, func(r *dlmpb.LockRequest) { r.Capacity, r.Permits = math.MaxUint32, math.MaxUint32 }),
		lock(15, "r", dlmpb.Mode_MODE_EX, func(r *dlmpb.LockRequest) { r.Metadata = make([]byte, 1025) /* one byte over the longest metadata */ }),
		lock(16, "r", dlmpb.Mode_MODE_EX, func(r *dlmpb.LockRequest) { r.NoQueue = true }),
		// an old client's lease TTL (field 7, reserved since), out of any bounds
		lock(17, "r", dlmpb.Mode_MODE_EX, OldTTL(durationpb.New(-time.Hour))),
		lock(1, "r", dlmpb.Mode_MODE_EX), // a repeated sequence
		lock(0, "r", dlmpb.Mode_MODE_NL),
		conv(20, 1, dlmpb.Mode_MODE_NL, nil),
		conv(21, 4, dlmpb.Mode_MODE_PR, durationpb.New(0)),
		conv(22, 3, dlmpb.Mode_MODE_EX, nil),
		conv(23, 1, dlmpb.Mode(7), &durationpb.Duration{Nanos: 2e9}),
		conv(24, 999, dlmpb.Mode_MODE_EX, nil),
		{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{Id: &dlmpb.RequestID{Session: 77, Seq: 30}, LockId: 4}}},
		{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{LockId: 2}}},
		{Msg: &dlmpb.SessionRequest_Cancel{Cancel: &dlmpb.CancelRequest{Id: &dlmpb.RequestID{Seq: 31}, LockId: 1}}},
		{Msg: &dlmpb.SessionRequest_Cancel{Cancel: &dlmpb.CancelRequest{Id: &dlmpb.RequestID{Seq: 32}, LockId: 4}}},
		{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: 1, SentUnixNano: -1}}},
		{},
	}
}

// OldTTL sets, as a client built before its removal would, the lock
// request's field 7 (ttl, now reserved) to d: the message carries it as an
// unknown field, which is sent as it is.
func OldTTL(d *durationpb.Duration) func(*dlmpb.LockRequest) {
	return func(l *dlmpb.LockRequest) {
		b, err := proto.Marshal(d)
		if err != nil {
			panic(err) // a Duration always encodes
		}
		raw := protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), b)
		l.ProtoReflect().SetUnknown(append(l.ProtoReflect().GetUnknown(), raw...))
	}
}

// LockMsg is a session request for resource in mode, numbered seq (its
// owner too).
func LockMsg(seq uint64, resource string, mode dlmpb.Mode) *dlmpb.SessionRequest {
	return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Seq: seq}, Resource: resource, Mode: mode, Owner: seq,
	}}}
}

// AnswerID returns the request id of an answer, nil for a pushed event.
func AnswerID(m *dlmpb.SessionResponse) *dlmpb.RequestID {
	switch msg := m.GetMsg().(type) {
	case *dlmpb.SessionResponse_Granted:
		return msg.Granted.GetId()
	case *dlmpb.SessionResponse_Queued:
		return msg.Queued.GetId()
	case *dlmpb.SessionResponse_Refused:
		return msg.Refused.GetId()
	case *dlmpb.SessionResponse_Released:
		return msg.Released.GetId()
	case *dlmpb.SessionResponse_Cancelled:
		return msg.Cancelled.GetId()
	}
	return nil
}

package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"

	"github.com/dlmhq/dlm/server/internal/ratelog"
)

// ErrStorage is wrapped by the error of a request that failed while this
// node cannot write its storage (the Raft log, the stable store or a
// snapshot): its disk is full or failing. Such an error also matches
// ErrNotLeader or ErrLeadershipLost when Raft stepped down for it, which
// says whether the request may have been applied.
var ErrStorage = errors.New("dlm server: this node's log cannot be written (its disk is full or failing)")

// The stores whose writes the node watches (StorageFailure.Store).
const (
	StoreLog      = "log"      // the Raft log
	StoreStable   = "stable"   // Raft's term and vote
	StoreSnapshot = "snapshot" // the snapshots
)

// StorageFailure is a store of the node whose writes fail.
type StorageFailure struct {
	// Store is StoreLog, StoreStable or StoreSnapshot.
	Store string
	// Op is the write that failed last ("append", "set", "snapshot"...).
	Op string
	// Err is the last failure's error.
	Err error
	// Since is the first failure since the store last wrote successfully.
	Since time.Time
	// Count is the number of failures since Since.
	Count uint64
}

// Cause is the failure's cause in a few words: the system's message for
// an errno (such as "no space left on device"), else Err's message.
func (f StorageFailure) Cause() string {
	var errno syscall.Errno
	if errors.As(f.Err, &errno) {
		return errno.Error()
	}
	if f.Err == nil {
		return "unknown error"
	}
	return f.Err.Error()
}

// storageLogInterval is how often a failing store's continued failure is
// logged, after its first failure.
const storageLogInterval = 30 * time.Second

// storageWatch records the failures of the node's writes.
type storageWatch struct {
	log   *slog.Logger
	rate  *ratelog.Limiter
	fault func(store, op string) error // Config.StorageFault

	total   atomic.Uint64 // failed writes ever
	anyFail atomic.Bool   // failing is not empty

	mu      sync.Mutex
	failing map[string]*StorageFailure
}

func newStorageWatch(log *slog.Logger, fault func(store, op string) error) *storageWatch {
	return &storageWatch{log: log, rate: ratelog.New(storageLogInterval), fault: fault, failing: map[string]*StorageFailure{}}
}

// do runs the write op of store, recording its outcome. A fault injected
// by Config.StorageFault fails it without running it.
func (w *storageWatch) do(store, op string, write func() error) error {
	var err error
	if w.fault != nil {
		err = w.fault(store, op)
	}
	if err == nil {
		err = write()
	}
	if err != nil {
		w.failed(store, op, err)
		return err
	}
	w.succeeded(store)
	return nil
}

// failed records a failed write of store.
func (w *storageWatch) failed(store, op string, err error) {
	w.total.Add(1)
	now := time.Now()
	w.mu.Lock()
	f := w.failing[store]
	first := f == nil
	if first {
		f = &StorageFailure{Store: store, Since: now}
		w.failing[store] = f
		w.anyFail.Store(true)
	}
	f.Op, f.Err = op, err
	f.Count++
	count, since := f.Count, f.Since
	w.mu.Unlock()
	key := "storage:" + store
	if first {
		w.rate.Reset(key)
		w.rate.Allow(key)
		w.log.Error("dlm server: storage write failed: this node refuses requests (REASON_STORAGE) until its writes succeed again",
			"store", store, "op", op, "err", err)
		return
	}
	w.rate.Log(context.Background(), w.log, slog.LevelError, key, "dlm server: storage writes still failing",
		"store", store, "op", op, "err", err, "failures", count, "since", since)
}

// succeeded clears a failure of store.
func (w *storageWatch) succeeded(store string) {
	if !w.anyFail.Load() {
		return
	}
	w.mu.Lock()
	f := w.failing[store]
	delete(w.failing, store)
	w.anyFail.Store(len(w.failing) > 0)
	w.mu.Unlock()
	if f != nil {
		w.rate.Reset("storage:" + store)
		w.log.Info("dlm server: storage writes succeed again", "store", store,
			"failures", f.Count, "failed_for", time.Since(f.Since).Round(time.Millisecond))
	}
}

// current returns the oldest failure among the failing stores.
func (w *storageWatch) current() (StorageFailure, bool) {
	if !w.anyFail.Load() {
		return StorageFailure{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out *StorageFailure
	for _, f := range w.failing {
		if out == nil || f.Since.Before(out.Since) {
			out = f
		}
	}
	if out == nil {
		return StorageFailure{}, false
	}
	return *out, true
}

// StorageFailure returns the failure of the node's storage, if a store's
// last write failed (the oldest such failure if several do); ok is false
// while every store writes.
func (n *Node) StorageFailure() (f StorageFailure, ok bool) {
	if n.storage == nil {
		return StorageFailure{}, false
	}
	return n.storage.current()
}

// StorageFailures returns the number of failed writes of the node's
// storage since it started.
func (n *Node) StorageFailures() uint64 {
	if n.storage == nil {
		return 0
	}
	return n.storage.total.Load()
}

// storageErr wraps ErrStorage around err, a request's failure, when the
// node's storage is failing or err is a storage error itself.
func (n *Node) storageErr(err error) error {
	if err == nil || errors.Is(err, ErrStorage) || n.storage == nil {
		return err
	}
	if f, ok := n.storage.current(); ok {
		return fmt.Errorf("%w: %s: %w", ErrStorage, f.Cause(), err)
	}
	if isStorageErrno(err) {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return err
}

// isStorageErrno reports whether err is a disk's failure: full, out of
// quota, read-only, or an I/O error.
func isStorageErrno(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EIO, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// watchedLog is the Raft log with its writes watched.
type watchedLog struct {
	raft.LogStore
	w *storageWatch
}

// StoreLog stores an entry.
func (l watchedLog) StoreLog(log *raft.Log) error {
	return l.w.do(StoreLog, "append", func() error { return l.LogStore.StoreLog(log) })
}

// StoreLogs stores entries.
func (l watchedLog) StoreLogs(logs []*raft.Log) error {
	return l.w.do(StoreLog, "append", func() error { return l.LogStore.StoreLogs(logs) })
}

// DeleteRange deletes entries min to max.
func (l watchedLog) DeleteRange(min, max uint64) error {
	return l.w.do(StoreLog, "truncate", func() error { return l.LogStore.DeleteRange(min, max) })
}

// IsMonotonic says what the store says (raft.MonotonicLogStore): raft-wal
// wants the log emptied after a snapshot is installed.
func (l watchedLog) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// watchedStable is the stable store with its writes watched.
type watchedStable struct {
	raft.StableStore
	w *storageWatch
}

// Set stores a value.
func (s watchedStable) Set(key, val []byte) error {
	return s.w.do(StoreStable, "set", func() error { return s.StableStore.Set(key, val) })
}

// SetUint64 stores a number.
func (s watchedStable) SetUint64(key []byte, val uint64) error {
	return s.w.do(StoreStable, "set", func() error { return s.StableStore.SetUint64(key, val) })
}

// snapshotTmp is the suffix of a snapshot being written in the snapshot
// store's directory (raft's FileSnapshotStore).
const snapshotTmp = ".tmp"

// watchedSnapshots is the file snapshot store with its writes watched; a
// snapshot that fails leaves nothing behind.
type watchedSnapshots struct {
	raft.SnapshotStore
	dir string // the store's directory, <Dir>/snapshots
	w   *storageWatch
}

// Create starts a snapshot.
func (s watchedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration, confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	var sink raft.SnapshotSink
	err := s.w.do(StoreSnapshot, "create", func() error {
		var err error
		sink, err = s.SnapshotStore.Create(version, index, term, conf, confIndex, trans)
		return err
	})
	if err != nil {
		// The store leaves the directory it began: <term>-<index>-<ms>.tmp.
		s.removeTmp(fmt.Sprintf("%d-%d-", term, index))
		return nil, err
	}
	return &watchedSink{SnapshotSink: sink, tmp: filepath.Join(s.dir, sink.ID()+snapshotTmp), w: s.w}, nil
}

// removeTmp removes the snapshots being written whose name starts with
// prefix ("" for all), and says how many it removed.
func (s watchedSnapshots) removeTmp(prefix string) int {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, snapshotTmp) {
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				s.w.log.Warn("dlm server: could not remove an unfinished snapshot", "path", filepath.Join(s.dir, name), "err", err)
				continue
			}
			n++
		}
	}
	return n
}

// watchedSink is a snapshot being written.
type watchedSink struct {
	raft.SnapshotSink
	tmp  string // its directory while it is written
	w    *storageWatch
	done bool
}

// Write writes part of the snapshot.
func (s *watchedSink) Write(p []byte) (int, error) {
	var n int
	err := s.w.do(StoreSnapshot, "snapshot", func() error {
		var err error
		n, err = s.SnapshotSink.Write(p)
		return err
	})
	return n, err
}

// Close finishes the snapshot; if that fails, its directory is removed.
func (s *watchedSink) Close() error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.w.do(StoreSnapshot, "snapshot", s.SnapshotSink.Close)
	if err != nil {
		s.remove()
	}
	return err
}

// Cancel abandons the snapshot and removes its directory, even when the
// store fails to close its files (as it does on a full disk).
func (s *watchedSink) Cancel() error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.SnapshotSink.Cancel()
	s.remove()
	return err
}

func (s *watchedSink) remove() {
	if err := os.RemoveAll(s.tmp); err != nil {
		s.w.log.Warn("dlm server: could not remove an unfinished snapshot", "path", s.tmp, "err", err)
	}
}

var _ io.WriteCloser = (*watchedSink)(nil)

// cleanVFS is raft-wal's file system, except that a segment file it could
// not create or preallocate (a full disk) is removed: raft-wal creates each
// segment with O_EXCL, and an empty file left behind would fail every
// later attempt with "file exists" after space returned.
type cleanVFS struct {
	*fs.FS
}

// Create creates and preallocates a segment file.
func (v cleanVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil && !errors.Is(err, os.ErrExist) {
		if rerr := os.Remove(filepath.Join(dir, name)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("dlm server: create raft log segment %s (%d bytes, preallocated): %w", name, size, err)
	}
	return f, err
}

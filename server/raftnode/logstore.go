package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
)

// The durable log stores a data directory can hold.
const (
	// LogStoreWAL is raft-wal: segment files in <dir>/wal, one fsync per
	// append. The default for a new data directory.
	LogStoreWAL = "wal"
	// LogStoreBolt is raft-boltdb: one bbolt file, <dir>/raft.db, two
	// fsyncs per append. Data directories made before raft-wal became the
	// default hold it, and keep it.
	LogStoreBolt = "bolt"
)

// ErrLogStore is wrapped by the error of a data directory whose log store
// is not the one asked for, or of an unknown store.
var ErrLogStore = errors.New("dlm server: log store")

// logStoreOf returns the log store of dir: the one it holds, else asked
// ("" means LogStoreWAL). Asking for another than the one it holds is an
// error wrapping ErrLogStore: a log is never converted or started empty
// beside another.
func logStoreOf(dir, asked string) (string, error) {
	if asked != "" && asked != LogStoreWAL && asked != LogStoreBolt {
		return "", fmt.Errorf("%w %q: want %s or %s", ErrLogStore, asked, LogStoreWAL, LogStoreBolt)
	}
	_, errWAL := os.Stat(filepath.Join(dir, "wal"))
	_, errBolt := os.Stat(filepath.Join(dir, "raft.db"))
	held := ""
	switch {
	case errWAL == nil && errBolt == nil:
		return "", fmt.Errorf("%w: %s holds both a raft-wal log (wal/) and a bbolt one (raft.db); move the one that is not current away", ErrLogStore, dir)
	case errWAL == nil:
		held = LogStoreWAL
	case errBolt == nil:
		held = LogStoreBolt
	}
	switch {
	case held == "" && asked == "":
		return LogStoreWAL, nil
	case held == "":
		return asked, nil
	case asked != "" && asked != held:
		return "", fmt.Errorf("%w: %s holds a %s log, not %s: the log is not converted; start with -log-store %s, or move the directory away to start empty", ErrLogStore, dir, held, asked, held)
	}
	return held, nil
}

// openLog opens the durable log and stable store of kind in dir. The
// node closes them (n.closers).
func (n *Node) openLog(kind string, hl hclog.Logger) (raft.LogStore, raft.StableStore, error) {
	if kind == LogStoreBolt {
		bolt, err := openBolt(n.cfg.Dir)
		if err != nil {
			return nil, nil, err
		}
		n.closers = append(n.closers, bolt)
		logs, err := raft.NewLogCache(512, bolt)
		if err != nil {
			return nil, nil, fmt.Errorf("dlm server: raft log cache: %w", err)
		}
		return logs, bolt, nil
	}
	dir := filepath.Join(n.cfg.Dir, "wal")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("dlm server: data dir: %w", err)
	}
	size := DefaultLogSegmentSize
	if n.cfg.LogSegmentSize != 0 {
		size = n.cfg.LogSegmentSize
	}
	if size < MinLogSegmentSize || size > MaxLogSegmentSize {
		return nil, nil, fmt.Errorf("%w: %d", ErrLogSegmentSize, size)
	}
	w, err := wal.Open(dir, wal.WithLogger(hl.Named("wal")), wal.WithSegmentSize(size),
		wal.WithSegmentFiler(segment.NewFiler(dir, cleanVFS{fs.New()})))
	if err != nil {
		return nil, nil, fmt.Errorf("dlm server: open raft log: %w", err)
	}
	n.closers = append(n.closers, w)
	return w, w, nil
}

package raftnode

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// A snapshot file is an online copy of a node's replicated state, as
// GET /v1/admin/snapshot serves it and `dlm snapshot save` writes it:
//
//	"DLMSNAP1"           magic, 8 bytes
//	index                the Raft index of the last entry in it, 8 bytes big-endian
//	length               of the state, 8 bytes big-endian
//	state                the FSM's snapshot (dlmpb.FSMSnapshot), length bytes
//	sha256               of everything before, 32 bytes
const snapshotMagic = "DLMSNAP1"

// MaxSnapshotFileBytes bounds the state in a snapshot file: 4 GiB, far
// above the largest state the table's limits allow.
const MaxSnapshotFileBytes = 4 << 30

// RestoreFile is the name, in a data directory, of a snapshot file waiting
// to be restored (see Config.Dir and PrepareRestore).
const RestoreFile = "restore.dlmsnap"

// Errors of snapshot files, to be matched with errors.Is.
var (
	// ErrBadSnapshotFile means a snapshot file is truncated, corrupt or
	// not a snapshot file.
	ErrBadSnapshotFile = errors.New("dlm server: not a valid snapshot file")
	// ErrDataDirNotEmpty means a restore was aimed at a data directory
	// that already holds Raft state or a pending restore.
	ErrDataDirNotEmpty = errors.New("dlm server: data dir is not fresh")
	// ErrNothingApplied means a node has applied no entry yet: it has no
	// state to copy.
	ErrNothingApplied = errors.New("dlm server: nothing applied yet")
)

// SnapshotFile is the content of a snapshot file.
type SnapshotFile struct {
	// Index is the Raft index of the last entry the state includes.
	Index uint64
	// State is the FSM's snapshot.
	State []byte
}

// Size is the size of the snapshot file in bytes.
func (s SnapshotFile) Size() int64 { return 24 + int64(len(s.State)) + sha256.Size }

// WriteTo writes the snapshot file to w.
func (s SnapshotFile) WriteTo(w io.Writer) (int64, error) {
	h := sha256.New()
	mw := io.MultiWriter(w, h)
	var head [24]byte
	copy(head[:8], snapshotMagic)
	binary.BigEndian.PutUint64(head[8:16], s.Index)
	binary.BigEndian.PutUint64(head[16:24], uint64(len(s.State)))
	n, err := mw.Write(head[:])
	total := int64(n)
	if err != nil {
		return total, err
	}
	n, err = mw.Write(s.State)
	total += int64(n)
	if err != nil {
		return total, err
	}
	n, err = w.Write(h.Sum(nil))
	return total + int64(n), err
}

// ReadSnapshotFile reads and checks a snapshot file: an error wraps
// ErrBadSnapshotFile if it is not one, whole and intact.
func ReadSnapshotFile(r io.Reader) (SnapshotFile, error) {
	h := sha256.New()
	tr := io.TeeReader(r, h)
	var head [24]byte
	if _, err := io.ReadFull(tr, head[:]); err != nil {
		return SnapshotFile{}, fmt.Errorf("%w: header: %v", ErrBadSnapshotFile, err)
	}
	if string(head[:8]) != snapshotMagic {
		return SnapshotFile{}, fmt.Errorf("%w: no %q at the start", ErrBadSnapshotFile, snapshotMagic)
	}
	s := SnapshotFile{Index: binary.BigEndian.Uint64(head[8:16])}
	size := binary.BigEndian.Uint64(head[16:24])
	if size > MaxSnapshotFileBytes {
		return SnapshotFile{}, fmt.Errorf("%w: a state of %d bytes, the most is %d", ErrBadSnapshotFile, size, uint64(MaxSnapshotFileBytes))
	}
	if s.Index == 0 {
		return SnapshotFile{}, fmt.Errorf("%w: index 0", ErrBadSnapshotFile)
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, tr, int64(size)); err != nil {
		return SnapshotFile{}, fmt.Errorf("%w: state: %v", ErrBadSnapshotFile, err)
	}
	s.State = buf.Bytes()
	want := h.Sum(nil)
	var sum [sha256.Size]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return SnapshotFile{}, fmt.Errorf("%w: checksum: %v", ErrBadSnapshotFile, err)
	}
	if !bytes.Equal(sum[:], want) {
		return SnapshotFile{}, fmt.Errorf("%w: checksum mismatch", ErrBadSnapshotFile)
	}
	if n, _ := r.Read(sum[:1]); n != 0 {
		return SnapshotFile{}, fmt.Errorf("%w: bytes after the checksum", ErrBadSnapshotFile)
	}
	return s, nil
}

// Copy returns an online copy of the node's state: the FSM as of the last
// entry applied. It fails with ErrNothingApplied before the node applied
// an entry.
func (n *Node) Copy() (SnapshotFile, error) {
	data, index, err := n.fsm.Encode()
	if err != nil {
		return SnapshotFile{}, err
	}
	if index == 0 {
		return SnapshotFile{}, ErrNothingApplied
	}
	return SnapshotFile{Index: index, State: data}, nil
}

// PrepareRestore checks the snapshot file at path and places it in dir, a
// data directory to be, as RestoreFile: a node opened on dir (Config.Dir)
// starts from it. dir must hold no Raft state (ErrDataDirNotEmpty): it is
// created if missing, and may hold nothing but a stale LOCK file.
func PrepareRestore(path, dir string) (SnapshotFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return SnapshotFile{}, err
	}
	defer f.Close()
	s, err := ReadSnapshotFile(f)
	if err != nil {
		return SnapshotFile{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return SnapshotFile{}, fmt.Errorf("dlm server: data dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return SnapshotFile{}, fmt.Errorf("dlm server: data dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() != "LOCK" {
			return SnapshotFile{}, fmt.Errorf("%w: %s holds %s; restore into a new, empty directory", ErrDataDirNotEmpty, dir, e.Name())
		}
	}
	tmp := filepath.Join(dir, RestoreFile+".tmp")
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return SnapshotFile{}, err
	}
	_, err = s.WriteTo(out)
	err = errors.Join(err, out.Sync(), out.Close())
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, RestoreFile))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return SnapshotFile{}, fmt.Errorf("dlm server: place the snapshot: %w", err)
	}
	return s, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// seedRestore, for a Dir without Raft state, turns a pending RestoreFile
// into the first Raft snapshot of the snapshot store, with configuration
// conf, and removes the file: Raft then starts from it. In a Dir with Raft
// state (exists), a leftover RestoreFile (a crash after the seed) is
// removed. It reports whether it seeded a snapshot.
func (n *Node) seedRestore(exists bool, snaps raft.SnapshotStore, conf func() (raft.Configuration, error)) (bool, error) {
	if n.cfg.InMemory || n.cfg.Dir == "" {
		return false, nil
	}
	path := filepath.Join(n.cfg.Dir, RestoreFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dlm server: restore: %w", err)
	}
	defer f.Close()
	if exists {
		n.log.Warn("dlm server: the data dir holds Raft state: the pending restore was seeded before, removing it", "file", path)
		return false, os.Remove(path)
	}
	if n.cfg.Join {
		return false, errors.New("dlm server: restore: a restored node starts a cluster of its own (-peers or alone), it does not join one")
	}
	s, err := ReadSnapshotFile(f)
	if err != nil {
		return false, fmt.Errorf("dlm server: restore %s: %w", path, err)
	}
	c, err := conf()
	if err != nil {
		return false, err
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, s.Index, 1, c, s.Index, n.retrying)
	if err != nil {
		return false, fmt.Errorf("dlm server: restore: %w", err)
	}
	if _, err := sink.Write(s.State); err != nil {
		_ = sink.Cancel()
		return false, fmt.Errorf("dlm server: restore: %w", err)
	}
	if err := sink.Close(); err != nil {
		return false, fmt.Errorf("dlm server: restore: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("dlm server: restore: %w", err)
	}
	n.log.Info("dlm server: restored a snapshot file into the data dir", "index", s.Index, "bytes", len(s.State))
	return true, syncDir(n.cfg.Dir)
}

package raftnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"
)

// ErrDataDirInUse means a data directory is in use by another dlm server
// (or another process holds its Raft log): two servers must never share
// one. Open returns it, as a *DataDirInUseError, at once instead of waiting
// for the directory to be free.
var ErrDataDirInUse = errors.New("dlm server: data dir in use")

// DataDirInUseError is the error of a data directory in use. It matches
// ErrDataDirInUse.
type DataDirInUseError struct {
	// Dir is the data directory, as configured.
	Dir string
	// PID is the process id of the dlm server that holds it, 0 if unknown
	// (another process holds the Raft log, or the holder had not written
	// its pid yet).
	PID int
}

// Error says which directory is in use, and by which process if known.
func (e *DataDirInUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("dlm server: data dir %s is in use by another dlm server (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("dlm server: data dir %s is in use by another process", e.Dir)
}

// Is matches ErrDataDirInUse.
func (e *DataDirInUseError) Is(target error) bool { return target == ErrDataDirInUse }

// lockFileName is the data directory's lock file: a dlm server holds an
// exclusive lock on it while it runs, and writes its pid in it.
const lockFileName = "LOCK"

// boltLockTimeout bounds the wait for bbolt's own lock of raft.db: with
// LOCK held it is only taken by a process that does not use LOCK (an
// earlier dlm, a bbolt tool), which must fail Open rather than block it.
const boltLockTimeout = 2 * time.Second

// dirLock is a held lock of a data directory.
type dirLock struct{ f *os.File }

// lockDataDir takes the lock of dir, without waiting: if another process
// (or another Node of this one) holds it, it returns a *DataDirInUseError
// with the holder's pid. The kernel releases the lock when the process
// ends, however it ends, so a killed server leaves no stale lock.
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("dlm server: data dir %s: %w", dir, err)
	}
	if err := tryLock(f); err != nil {
		pid := readPID(f)
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, &DataDirInUseError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("dlm server: lock data dir %s: %w", dir, err)
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("dlm server: lock data dir %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

// Close empties the lock file and releases the lock.
func (l *dirLock) Close() error {
	return errors.Join(l.f.Truncate(0), l.f.Close())
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// readPID returns the pid in a lock file, 0 if there is none.
func readPID(f *os.File) int {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 64))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// openBolt opens the Raft log raft.db in dir, failing with a
// *DataDirInUseError if another process holds it beyond boltLockTimeout.
func openBolt(dir string) (*raftboltdb.BoltStore, error) {
	opts := *bbolt.DefaultOptions
	opts.Timeout = boltLockTimeout
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: &opts})
	if errors.Is(err, bberrors.ErrTimeout) {
		return nil, &DataDirInUseError{Dir: dir}
	}
	if err != nil {
		return nil, fmt.Errorf("dlm server: open raft log: %w", err)
	}
	return store, nil
}

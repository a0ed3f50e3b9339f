//go:build !unix

package raftnode

import (
	"errors"
	"os"
)

// errLocked means the lock is held by another.
var errLocked = errors.New("locked")

// tryLock takes no lock where flock is missing: bbolt's own lock of
// raft.db, bounded by boltLockTimeout, still keeps a second server out,
// without the holder's pid.
func tryLock(*os.File) error { return nil }

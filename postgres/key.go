package postgres

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
)

// keyPrefix starts the resource names that carry an explicit key.
const keyPrefix = "pgkey:"

// Key returns the resource name that locks the advisory key n itself rather
// than a hash, for sharing a lock with code that calls pg_advisory_lock(n)
// directly. The name is "pgkey:" followed by n in decimal.
func Key(n int64) string { return keyPrefix + strconv.FormatInt(n, 10) }

// KeyOf returns the advisory lock key of resource: n for a name made by
// Key(n), otherwise the first 8 bytes of SHA-256("dlm\x00" + resource) as a
// big-endian int64. It is stable across processes, builds and versions.
func KeyOf(resource string) int64 {
	if digits, ok := strings.CutPrefix(resource, keyPrefix); ok {
		// Only the canonical form ("pgkey:42", not "pgkey:042") is a
		// key, so that each key has exactly one name.
		if n, err := strconv.ParseInt(digits, 10, 64); err == nil && strconv.FormatInt(n, 10) == digits {
			return n
		}
	}
	sum := sha256.Sum256([]byte("dlm\x00" + resource))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// lockID splits key as pg_locks shows a bigint advisory lock: the high half
// in classid, the low half in objid (with objsubid 1).
func lockID(key int64) (classid, objid uint32) {
	return uint32(uint64(key) >> 32), uint32(key)
}

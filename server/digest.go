package server

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Kinds of request in a digest's encoding. The values are part of the
// replicated behaviour (digests are kept in snapshots): never renumber.
const (
	digestLock    = 1
	digestConvert = 2
	digestRelease = 3
	digestCancel  = 4
)

// requestDigest returns a 64-bit FNV-1a digest of the content of request
// command c: its kind and every field that changes its effect, in a fixed
// explicit encoding (not proto.Marshal, whose bytes may change between
// library versions), so that every replica and every version computes the
// same value. The request id is not part of it. The digest is never 0,
// which stands for "unknown" in replies restored from older snapshots.
func requestDigest(c *dlmpb.Command) uint64 {
	var b digestBuf
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Lock:
		l := op.Lock
		b.u64(digestLock)
		b.u64(l.GetSession())
		b.u64(l.GetOwner())
		b.bytes([]byte(l.GetResource()))
		b.u64(uint64(uint32(l.GetMode())))
		b.bool(l.GetNoQueue())
		b.wait(l.WaitNanos)
		b.u64(uint64(l.GetCapacity()))
		b.u64(uint64(l.GetPermits()))
		b.bytes(l.GetMetadata())
	case *dlmpb.Command_Convert:
		cv := op.Convert
		b.u64(digestConvert)
		b.u64(cv.GetSession())
		b.u64(cv.GetLockId())
		b.u64(uint64(uint32(cv.GetMode())))
		b.bool(cv.GetNoQueue())
		b.bool(cv.GetQueueConvert())
		b.wait(cv.WaitNanos)
	case *dlmpb.Command_Release:
		b.u64(digestRelease)
		b.u64(op.Release.GetSession())
		b.u64(op.Release.GetLockId())
	case *dlmpb.Command_Cancel:
		b.u64(digestCancel)
		b.u64(op.Cancel.GetSession())
		b.u64(op.Cancel.GetLockId())
	}
	h := fnv.New64a()
	_, _ = h.Write(b) // a hash.Hash never fails
	return max(h.Sum64(), 1)
}

// digestBuf is the canonical encoding a digest is computed over: fixed-width
// little-endian integers and length-prefixed bytes.
type digestBuf []byte

func (b *digestBuf) u64(v uint64) { *b = binary.LittleEndian.AppendUint64(*b, v) }

func (b *digestBuf) bool(v bool) {
	if v {
		*b = append(*b, 1)
	} else {
		*b = append(*b, 0)
	}
}

func (b *digestBuf) bytes(v []byte) {
	b.u64(uint64(len(v)))
	*b = append(*b, v...)
}

// wait encodes an optional wait: unset (wait forever) differs from 0.
func (b *digestBuf) wait(w *int64) {
	if w == nil {
		b.bool(false)
		return
	}
	b.bool(true)
	b.u64(uint64(*w))
}

package fsm

import (
	"encoding/binary"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Kinds of request in a digest's encoding. The values are part of the
// replicated behaviour (digests are kept in snapshots): never renumber.
const (
	digestLock    = 1
	digestConvert = 2
	digestRelease = 3
	digestCancel  = 4
	digestRelabel = 5
)

// requestDigest returns a 64-bit FNV-1a digest of the content of request
// command c: its kind and every field that changes its effect, in a fixed
// explicit encoding (not proto.Marshal, whose bytes may change between
// library versions), so that every replica and every version computes the
// same value. The request id is not part of it. The digest is never 0,
// which stands for "unknown" in replies restored from older snapshots.
func requestDigest(c *dlmpb.Command) uint64 {
	var arr [256]byte // most requests fit: no allocation
	b := arr[:0]
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Lock:
		l := op.Lock
		b = digestU64(b, digestLock)
		b = digestU64(b, l.GetSession())
		b = digestU64(b, l.GetOwner())
		b = append(digestU64(b, uint64(len(l.GetResource()))), l.GetResource()...)
		b = digestU64(b, uint64(uint32(l.GetMode())))
		b = digestBool(b, l.GetNoQueue())
		b = digestWait(b, l.WaitNanos)
		b = digestU64(b, uint64(l.GetCapacity()))
		b = digestU64(b, uint64(l.GetPermits()))
		b = append(digestU64(b, uint64(len(l.GetMetadata()))), l.GetMetadata()...)
	case *dlmpb.Command_Convert:
		cv := op.Convert
		b = digestU64(b, digestConvert)
		b = digestU64(b, cv.GetSession())
		b = digestU64(b, cv.GetLockId())
		b = digestU64(b, uint64(uint32(cv.GetMode())))
		b = digestBool(b, cv.GetNoQueue())
		b = digestBool(b, cv.GetQueueConvert())
		b = digestWait(b, cv.WaitNanos)
	case *dlmpb.Command_Release:
		b = digestU64(b, digestRelease)
		b = digestU64(b, op.Release.GetSession())
		b = digestU64(b, op.Release.GetLockId())
	case *dlmpb.Command_Cancel:
		b = digestU64(b, digestCancel)
		b = digestU64(b, op.Cancel.GetSession())
		b = digestU64(b, op.Cancel.GetLockId())
	case *dlmpb.Command_Relabel:
		r := op.Relabel
		b = digestU64(b, digestRelabel)
		b = digestU64(b, r.GetSession())
		b = digestU64(b, r.GetLockId())
		b = append(digestU64(b, uint64(len(r.GetMetadata()))), r.GetMetadata()...)
	}
	h := uint64(fnvOffset)
	for _, x := range b {
		h ^= uint64(x)
		h *= fnvPrime
	}
	return max(h, 1)
}

// FNV-1a's 64-bit parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// The canonical encoding a digest is computed over: fixed-width
// little-endian integers, one byte per bool, length-prefixed bytes.

func digestU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func digestBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// digestWait encodes an optional wait: unset (wait forever) differs from 0.
func digestWait(b []byte, w *int64) []byte {
	if w == nil {
		return digestBool(b, false)
	}
	return digestU64(digestBool(b, true), uint64(*w))
}

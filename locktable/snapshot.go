package locktable

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/dlmhq/dlm/driver"
)

// Snapshot format, version 1. Integers are unsigned varints ("u") or
// zig-zag signed varints ("s", times and deadlines), as in encoding/binary;
// strings are a u length and the bytes; modes and kinds are one byte.
//
//	"DLMT" version:byte(1)
//	now:s lastToken:u nextLockID:u
//	sessions:u { id:u openedAt:s label:string }        ids increasing
//	resources:u {                                      names increasing
//	    name:string kind:byte capacity:u
//	    granted:u { id:u session:u owner:u mode:byte permits:u
//	                token:u grantedAt:s notified:byte } grant order
//	    converting:u { id:u want:byte queuedAt:s deadline:s } queue order
//	    waiting:u { id:u session:u owner:u want:byte permits:u
//	                queuedAt:s deadline:s }             queue order
//	}
//
// Everything else (owner lists, deadline heap, counts) is derived on
// Restore. The encoding is canonical: equal tables give equal bytes.
const (
	snapshotMagic   = "DLMT"
	snapshotVersion = 1
)

// maxCounter bounds the last token and the next lock id of a snapshot. No
// table gets near it (a billion grants a second take 292 years; tokens
// also follow Stamp.Index, a Raft index, which never does either), and it
// is far enough below 2^64 that a restored table never wraps them around,
// which would issue lock id 0, reuse ids and make tokens go back.
const maxCounter = 1 << 63

// Snapshot returns the whole state of the table in a compact, versioned,
// deterministic binary form: replaying the same operations on two tables
// gives byte-identical snapshots. Limits are configuration, not state, and
// are not included.
func (t *Table) Snapshot() []byte { return t.AppendSnapshot(nil) }

// AppendSnapshot appends the snapshot to b and returns the extended slice.
func (t *Table) AppendSnapshot(b []byte) []byte {
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.AppendVarint(b, t.now)
	b = binary.AppendUvarint(b, t.lastToken)
	b = binary.AppendUvarint(b, uint64(t.nextID))

	ids := t.sortedSessionIDs(0)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		s := t.sessions[id]
		b = binary.AppendUvarint(b, uint64(s.id))
		b = binary.AppendVarint(b, s.openedAt)
		b = appendString(b, s.label)
	}

	type named struct {
		name string
		r    *resource
	}
	rs := make([]named, 0, len(t.resources))
	for name, r := range t.resources {
		rs = append(rs, named{name, r})
	}
	slices.SortFunc(rs, func(x, y named) int { return strings.Compare(x.name, y.name) })
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for _, nr := range rs {
		r := nr.r
		b = appendString(b, r.name)
		b = append(b, byte(r.kind))
		b = binary.AppendUvarint(b, uint64(r.capacity))
		b = binary.AppendUvarint(b, uint64(r.granted.n))
		for l := r.granted.head; l != nil; l = l.link[linkGranted].next {
			b = binary.AppendUvarint(b, uint64(l.id))
			b = binary.AppendUvarint(b, uint64(l.sess.id))
			b = binary.AppendUvarint(b, uint64(l.owner))
			b = append(b, byte(l.mode))
			b = binary.AppendUvarint(b, uint64(l.permits))
			b = binary.AppendUvarint(b, l.token)
			b = binary.AppendVarint(b, l.grantedAt)
			b = append(b, l.notified)
		}
		var conv, wait lockList
		if r.q != nil {
			conv, wait = r.q.conv, r.q.wait
		}
		b = binary.AppendUvarint(b, uint64(conv.n))
		for l := conv.head; l != nil; l = l.link[linkQueue].next {
			b = binary.AppendUvarint(b, uint64(l.id))
			b = append(b, byte(l.want))
			b = binary.AppendVarint(b, l.queuedAt)
			b = binary.AppendVarint(b, l.deadline)
		}
		b = binary.AppendUvarint(b, uint64(wait.n))
		for l := wait.head; l != nil; l = l.link[linkQueue].next {
			b = binary.AppendUvarint(b, uint64(l.id))
			b = binary.AppendUvarint(b, uint64(l.sess.id))
			b = binary.AppendUvarint(b, uint64(l.owner))
			b = append(b, byte(l.want))
			b = binary.AppendUvarint(b, uint64(l.permits))
			b = binary.AppendVarint(b, l.queuedAt)
			b = binary.AppendVarint(b, l.deadline)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Restore replaces the whole state of the table with the snapshot data.
// Malformed or inconsistent data (truncated, trailing bytes, unknown
// version, incompatible granted locks, dangling ids...) returns an error
// matching ErrMalformedSnapshot and leaves the table unchanged. Limits are
// not checked against the restored state. Restore keeps no reference to
// data.
func (t *Table) Restore(data []byte) error {
	n := &Table{lim: t.lim}
	n.reset()
	d := decoder{b: data}
	if err := n.decode(&d); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedSnapshot, err)
	}
	*t = *n
	return nil
}

// decoder reads snapshot fields; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail("bad, padded or truncated integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint reads a zigzag-encoded signed integer, the encoding of
// binary.AppendVarint: a uvarint whose low bit is the sign.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// uint32 reads a u that must fit 32 bits.
func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.fail("value %d out of range", v)
		return 0
	}
	return uint32(v)
}

// count reads a number of records, each at least min bytes long, so that a
// corrupt count cannot make Restore allocate more than the input's size.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/min) {
		d.fail("count %d exceeds the remaining %d bytes", v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.count(1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// decode fills the empty table t from d.
func (t *Table) decode(d *decoder) error {
	if len(d.b) < len(snapshotMagic)+1 || string(d.b[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("not a lock table snapshot")
	}
	if v := d.b[len(snapshotMagic)]; v != snapshotVersion {
		return fmt.Errorf("unsupported version %d", v)
	}
	d.b = d.b[len(snapshotMagic)+1:]
	t.now = d.varint()
	t.lastToken = d.uvarint()
	t.nextID = LockID(d.uvarint())
	switch {
	case d.err != nil:
	case t.nextID == 0:
		d.fail("next lock id is 0")
	case uint64(t.nextID) >= maxCounter || t.lastToken >= maxCounter:
		d.fail("next lock id %d or last token %d beyond 2^63", t.nextID, t.lastToken)
	}

	var prevID SessionID
	for i, n := 0, d.count(3); i < n && d.err == nil; i++ {
		s := &session{id: SessionID(d.uvarint()), openedAt: d.varint(), label: d.string()}
		if d.err == nil && (s.id == 0 || (i > 0 && s.id <= prevID)) {
			d.fail("session ids not increasing at %d", s.id)
		}
		prevID = s.id
		t.sessions[s.id] = s
	}

	var all []*lock
	var prevName string
	for i, n := 0, d.count(5); i < n && d.err == nil; i++ {
		r := &resource{name: d.string(), kind: Kind(d.byte()), capacity: d.uint32()}
		switch {
		case d.err != nil:
		case r.name == "" || (i > 0 && r.name <= prevName):
			d.fail("resource names not increasing at %q", r.name)
		case r.kind == KindLock && r.capacity != 0, r.kind == KindSemaphore && r.capacity == 0,
			r.kind != KindLock && r.kind != KindSemaphore:
			d.fail("resource %q: bad kind %d or capacity %d", r.name, r.kind, r.capacity)
		}
		prevName = r.name
		t.resources[r.name] = r
		all = t.decodeResource(d, r, all)
		if d.err == nil && r.empty() {
			d.fail("resource %q is empty", r.name)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	slices.SortFunc(all, func(a, b *lock) int { return cmp.Compare(a.id, b.id) })
	for _, l := range all {
		l.sess.locks.pushBack(l, linkSession)
	}
	return nil
}

// decodeResource reads the locks and queues of r, appending every new lock
// record to all.
func (t *Table) decodeResource(d *decoder, r *resource, all []*lock) []*lock {
	for i, n := 0, d.count(8); i < n && d.err == nil; i++ {
		l := t.decodeLock(d, r)
		l.mode = driver.Mode(d.byte())
		l.permits = d.uint32()
		l.token = d.uvarint()
		l.grantedAt = d.varint()
		l.notified = d.byte()
		l.state = stateGranted
		if d.err != nil {
			break
		}
		if !t.checkLock(d, r, l, l.mode) {
			break
		}
		switch {
		case l.token == 0 || l.token > t.lastToken:
			d.fail("lock %d: token %d outside [1, %d]", l.id, l.token, t.lastToken)
		case r.kind == KindLock && !r.compatibleNew(l.mode):
			d.fail("lock %d: %v incompatible with other holders of %q", l.id, l.mode, r.name)
		case r.kind == KindLock && l.notified&^0x7e != 0, r.kind == KindSemaphore && l.notified > 1:
			d.fail("lock %d: bad notice mask %#x", l.id, l.notified)
		case r.kind == KindSemaphore && !r.fits(l.permits):
			d.fail("semaphore %q over capacity", r.name)
		}
		if d.err != nil {
			break
		}
		r.addGranted(l)
		all = append(all, l)
	}

	for i, n := 0, d.count(4); i < n && d.err == nil; i++ {
		id := LockID(d.uvarint())
		want := driver.Mode(d.byte())
		queuedAt, deadline := d.varint(), d.varint()
		if d.err != nil {
			break
		}
		l := t.locks[id]
		switch {
		case l == nil || l.res != r || l.state != stateGranted:
			d.fail("conversion of lock %d: not a granted lock of %q", id, r.name)
		case r.kind != KindLock || !want.Valid() || isDownConversion(l.mode, want):
			d.fail("conversion of lock %d: bad mode %v", id, want)
		case r.q != nil && r.q.conv.tail != nil && r.q.conv.tail.queuedAt > queuedAt:
			d.fail("conversion queue of %q out of order", r.name)
		}
		if d.err != nil {
			break
		}
		l.state, l.want = stateConverting, want
		t.enqueue(l, deadline)
		l.queuedAt = queuedAt
	}

	for i, n := 0, d.count(7); i < n && d.err == nil; i++ {
		l := t.decodeLock(d, r)
		l.want = driver.Mode(d.byte())
		l.permits = d.uint32()
		queuedAt, deadline := d.varint(), d.varint()
		l.state = stateWaiting
		if d.err != nil || !t.checkLock(d, r, l, l.want) {
			break
		}
		if r.q != nil && r.q.wait.tail != nil && r.q.wait.tail.id > l.id {
			d.fail("wait queue of %q out of order", r.name)
			break
		}
		t.enqueue(l, deadline)
		l.queuedAt = queuedAt
		all = append(all, l)
	}
	if d.err == nil && t.headGrantable(r) {
		d.fail("resource %q: the head of a queue is grantable", r.name)
	}
	return all
}

// headGrantable reports whether the request that r would grant next could
// be granted now, which never holds between operations (unless its deadline
// has passed and it awaits Advance).
func (t *Table) headGrantable(r *resource) bool {
	if r.q == nil {
		return false
	}
	h := r.q.conv.head
	if h == nil {
		h = r.q.wait.head
	}
	if h.deadline != 0 && h.deadline <= t.now {
		return false
	}
	switch {
	case r.kind == KindSemaphore:
		return r.fits(h.permits)
	case h.state == stateConverting:
		return r.compatibleConv(h, h.want)
	}
	return r.compatibleNew(h.want)
}

// decodeLock reads the identity of a lock record of r and registers it.
func (t *Table) decodeLock(d *decoder, r *resource) *lock {
	l := &lock{id: LockID(d.uvarint()), res: r, heapIdx: -1}
	sid := SessionID(d.uvarint())
	l.owner = OwnerID(d.uvarint())
	if d.err != nil {
		return l
	}
	switch {
	case l.id == 0 || l.id >= t.nextID:
		d.fail("lock id %d outside [1, %d)", l.id, t.nextID)
	case t.locks[l.id] != nil:
		d.fail("duplicate lock id %d", l.id)
	case t.sessions[sid] == nil:
		d.fail("lock %d: unknown session %d", l.id, sid)
	default:
		l.sess = t.sessions[sid]
		t.locks[l.id] = l
	}
	return l
}

// checkLock validates the mode (locks) or permits (semaphores) of l.
func (t *Table) checkLock(d *decoder, r *resource, l *lock, m driver.Mode) bool {
	if d.err != nil {
		return false
	}
	if r.kind == KindLock && (!m.Valid() || l.permits != 0) ||
		r.kind == KindSemaphore && (m != 0 || l.permits == 0 || l.permits > r.capacity) {
		d.fail("lock %d: bad mode %d or permits %d for a %v", l.id, m, l.permits, r.kind)
		return false
	}
	return true
}

package redislua

import (
	"strings"
	"time"
)

// The redis store's lock value is the owner (32 hex), the queue mark, the
// grant's time (GrantTime) and the metadata. The mark is MarkAlone when
// the lock is granted with no queue at all, and turns MarkQueued when a
// caller queues for it (or when it is granted from a queue): a release of
// a lock still marked MarkAlone frees it without looking for a waiter to
// hand it to.
const (
	MarkAlone  = "0"
	MarkQueued = "1"
)

// StampLen is the length of the queue mark and the grant's time together,
// which follow the owner in the redis store's lock value.
const StampLen = 1 + GrantTimeLen

// GrantTimeLen is the width of the grant's time in the redis store's lock
// value: microseconds since the epoch in base 64, with the digits of
// timeDigits, which holds every time until the year 2540. The owner, the
// mark and the time make 42 bytes, so that the value of a lock without
// metadata (or with two bytes of it) stays within the 44 bytes that Redis
// stores in one allocation with its header (an embedded string), which
// makes its SET and GET cheaper than a longer value's.
const GrantTimeLen = 9

// timeDigits are the digits of a grant's time, in ASCII order, so that
// grant times sort as their strings do.
const timeDigits = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// maxGrantMicros is the largest time GrantTimeLen digits hold.
const maxGrantMicros = 1<<(6*GrantTimeLen) - 1

// GrantTime formats t as the redis store's scripts take a grant's time:
// GrantTimeLen digits of microseconds since the epoch (see timeDigits).
// A time before the epoch is written as the epoch, one past the year 2540
// as the last that fits.
func GrantTime(t time.Time) string {
	var digits [GrantTimeLen]byte
	return string(appendGrantTime(digits[:0], t))
}

// appendGrantTime appends GrantTime(t) to b.
func appendGrantTime(b []byte, t time.Time) []byte {
	us := min(uint64(max(t.UnixMicro(), 0)), maxGrantMicros)
	for shift := 6 * (GrantTimeLen - 1); shift >= 0; shift -= 6 {
		b = append(b, timeDigits[us>>shift&63])
	}
	return b
}

// parseGrantTime reads a time that GrantTime wrote, and reports whether it
// is one (the epoch itself is not).
func parseGrantTime(s string) (time.Time, bool) {
	if len(s) != GrantTimeLen {
		return time.Time{}, false
	}
	var us int64
	for i := range len(s) {
		d := strings.IndexByte(timeDigits, s[i])
		if d < 0 {
			return time.Time{}, false
		}
		us = us<<6 | int64(d)
	}
	if us == 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// parseStamp splits what follows the owner in a Dated lock value into the
// grant's time and the metadata. A value that does not begin with a stamp
// is all metadata, with no time.
func parseStamp(rest string) (time.Time, string) {
	if len(rest) < StampLen || (rest[:1] != MarkAlone && rest[:1] != MarkQueued) {
		return time.Time{}, rest
	}
	t, ok := parseGrantTime(rest[1:StampLen])
	if !ok {
		return time.Time{}, rest
	}
	return t, rest[StampLen:]
}

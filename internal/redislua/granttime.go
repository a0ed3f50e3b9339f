package redislua

import (
	"strconv"
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
const StampLen = 1 + GrantTimeDigits

// GrantTimeDigits is the width of the grant's time in the redis store's
// lock value: microseconds since the epoch in decimal, zero-padded, which
// holds every time until the year 2286.
const GrantTimeDigits = 16

// GrantTime formats t as the redis store's scripts take a grant's time:
// GrantTimeDigits decimal digits of microseconds since the epoch.
func GrantTime(t time.Time) string {
	us := strconv.FormatInt(max(t.UnixMicro(), 0), 10)
	if len(us) >= GrantTimeDigits {
		return us[len(us)-GrantTimeDigits:]
	}
	return strings.Repeat("0", GrantTimeDigits-len(us)) + us
}

// parseGrantTime reads a time that GrantTime wrote, and reports whether it
// is one.
func parseGrantTime(s string) (time.Time, bool) {
	if len(s) != GrantTimeDigits {
		return time.Time{}, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, false
		}
	}
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil || us == 0 {
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

package redislua

import (
	"strconv"
	"strings"
	"time"
)

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

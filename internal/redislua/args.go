package redislua

import (
	"strconv"
	"strings"
	"time"
)

// Settings are the redis store's settings as its Acquire and Release
// scripts take them, in one argument: the liveness of a waiter's place and
// the fence retention, in milliseconds, separated by a space.
func Settings(liveness, retention time.Duration) string {
	return strconv.FormatInt(liveness.Milliseconds(), 10) + " " + strconv.FormatInt(retention.Milliseconds(), 10)
}

// TimeThen returns GrantTime(t) followed by s, in one allocation: the
// argument of the Acquire script that holds the caller's clock and the
// metadata, and of the Release script that holds the clock and Settings.
func TimeThen(t time.Time, s string) string {
	var b strings.Builder
	b.Grow(GrantTimeLen + len(s))
	var digits [GrantTimeLen]byte
	b.Write(appendGrantTime(digits[:0], t))
	b.WriteString(s)
	return b.String()
}

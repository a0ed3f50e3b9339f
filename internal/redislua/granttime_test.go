package redislua

import (
	"strings"
	"testing"
	"time"
)

// A grant's time is GrantTimeLen digits, reads back as the same
// microsecond, and sorts as the time does; anything else does not read as
// one.
func TestGrantTime(t *testing.T) {
	times := []time.Time{
		time.UnixMicro(1), time.UnixMicro(63), time.UnixMicro(64), time.UnixMicro(999_999),
		time.UnixMicro(1_795_747_072_592_486), time.UnixMicro(1_795_747_072_592_487),
		time.UnixMicro(maxGrantMicros), // the last that fits: in 2540
	}
	for i, at := range times {
		s := GrantTime(at)
		if len(s) != GrantTimeLen {
			t.Fatalf("GrantTime(%s) = %q, %d digits", at, s, len(s))
		}
		if back, ok := parseGrantTime(s); !ok || !back.Equal(at.Truncate(time.Microsecond)) {
			t.Fatalf("%q reads back as %s, %v; want %s", s, back, ok, at)
		}
		if i > 0 && GrantTime(times[i-1]) >= s {
			t.Fatalf("%s is later than %s, but %q does not sort after %q", at, times[i-1], s, GrantTime(times[i-1]))
		}
	}
	if y := time.UnixMicro(maxGrantMicros).Year(); y != 2540 {
		t.Fatalf("the last time that fits is in %d", y)
	}
	if s := GrantTime(time.UnixMicro(42)); s != "--------e" {
		t.Fatalf("GrantTime of 42 µs = %q", s)
	}
	if s := GrantTime(time.Unix(-5, 0)); s != strings.Repeat("-", GrantTimeLen) {
		t.Fatalf("a time before the epoch = %q", s)
	}
	if s := GrantTime(time.UnixMicro(maxGrantMicros).Add(time.Hour)); s != strings.Repeat("z", GrantTimeLen) {
		t.Fatalf("a time past the last that fits = %q", s)
	}
	for _, s := range []string{"", "123", "--------!", "---------", "12345678901", "0000 0000"} {
		if at, ok := parseGrantTime(s); ok {
			t.Fatalf("%q read as the time %s", s, at)
		}
	}
}

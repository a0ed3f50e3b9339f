package redislua

import (
	"testing"
	"time"
)

// A grant's time is GrantTimeDigits digits, zero-padded, and reads back as
// the same microsecond; anything else does not read as one.
func TestGrantTime(t *testing.T) {
	for _, at := range []time.Time{
		time.UnixMicro(1), time.UnixMicro(999_999), time.UnixMicro(1_795_747_072_592_486),
		time.Date(2286, 11, 20, 17, 46, 39, 999_999_000, time.UTC), // the last that fits
	} {
		s := GrantTime(at)
		if len(s) != GrantTimeDigits {
			t.Fatalf("GrantTime(%s) = %q, %d digits", at, s, len(s))
		}
		if back, ok := parseGrantTime(s); !ok || !back.Equal(at.Truncate(time.Microsecond)) {
			t.Fatalf("%q reads back as %s, %v; want %s", s, back, ok, at)
		}
	}
	if s := GrantTime(time.UnixMicro(42)); s != "0000000000000042" {
		t.Fatalf("GrantTime of 42 µs = %q", s)
	}
	for _, s := range []string{"", "123", "000000000000004x", "0000000000000000", "-000000000000042", "12345678901234567"} {
		if at, ok := parseGrantTime(s); ok {
			t.Fatalf("%q read as the time %s", s, at)
		}
	}
}

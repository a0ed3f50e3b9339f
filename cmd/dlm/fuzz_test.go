//go:build unix

package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzSettings feeds any string to the parsers of dlm's flags and
// environment that are not a store URL or a lock mode (fuzzed in their own
// packages): --wait, --log-level, DLM_IN_MEMORY, and the session label and
// holder metadata dlm run derives from its command line. None panics; a
// --wait it takes is not negative and prints back to itself; the label and
// metadata are valid UTF-8 of at most 200 bytes, as the stores want.
func FuzzSettings(f *testing.F) {
	for _, s := range []string{"0", "30s", "-1s", "1h2m3.5s", "forever", "", "9223372036854775807ns", "1e3s",
		"debug", "WARN", "info+2", "error-8", "yes", "On", "1", "\xff\xfe", strings.Repeat("é", 150)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d time.Duration
		w := &waitFlag{d: &d}
		if err := w.Set(s); err != nil {
			if w.set || w.String() != "forever" {
				t.Fatalf("--wait %q refused (%v) but set to %s", s, err, w)
			}
		} else {
			again := &waitFlag{d: new(time.Duration)}
			if d < 0 || !w.set || again.Set(w.String()) != nil || *again.d != d {
				t.Fatalf("--wait %q = %s, which does not read back", s, w)
			}
		}

		var level slog.Level
		if _, err := newLogger(io.Discard, s); (err == nil) != (level.UnmarshalText([]byte(s)) == nil) {
			t.Fatalf("--log-level %q: %v", s, err)
		}

		if !strings.Contains(s, "\x00") { // no environment variable holds a NUL
			t.Setenv("DLM_FUZZ_BOOL", s)
			want := map[string]bool{"1": true, "true": true, "yes": true, "on": true}[strings.ToLower(s)]
			if envBool("DLM_FUZZ_BOOL") != want {
				t.Fatalf("DLM_FUZZ_BOOL=%q read as %v", s, !want)
			}
		}

		for name, v := range map[string]string{"label": label([]string{s, "arg"}), "metadata": defaultMetadata([]string{s, s})} {
			if !utf8.ValidString(v) || len(v) > 200 || v == "" {
				t.Fatalf("%s for command %q: %q (%d bytes)", name, s, v, len(v))
			}
		}
	})
}

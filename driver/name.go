package driver

// The rule for the names dlm accepts, resource names and session labels,
// lives here, beside the contract every store shares, so that the Go client
// (package dlm), package dlmserver and the dlm server refuse the same names.
//
// A name is valid UTF-8 with no Unicode control character (general
// category Cc: U+0000-U+001F and U+007F-U+009F) and no bidirectional
// formatting character (property Bidi_Control: U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069). Control characters garble terminals and
// logs; bidirectional ones make a listing show a name other than the one
// held. Every other character, any script or symbol, is allowed.

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckName returns nil if s may be a name (the empty string included, which
// callers refuse where a name is required), else an error saying which
// byte or character is not allowed and where, such as "control character
// U+0000 at byte 3".
func CheckName(s string) error {
	for i, r := range s {
		switch {
		case r < utf8.RuneSelf:
			// ASCII: control characters only (no Bidi_Control below U+061C).
			if r < 0x20 || r == 0x7f {
				return fmt.Errorf("control character %U at byte %d", r, i)
			}
		case r == utf8.RuneError && !validAt(s, i):
			return fmt.Errorf("byte %d (%#02x) is not valid UTF-8", i, s[i])
		case unicode.IsControl(r):
			return fmt.Errorf("control character %U at byte %d", r, i)
		case unicode.Is(unicode.Bidi_Control, r):
			return fmt.Errorf("bidirectional formatting character %U at byte %d", r, i)
		}
	}
	return nil
}

// validAt reports whether the U+FFFD that range decoded at byte i of s was
// written there, rather than standing for an invalid byte.
func validAt(s string, i int) bool {
	_, n := utf8.DecodeRuneInString(s[i:])
	return n == 3
}

// SanitizeName returns s with every byte that is not valid UTF-8 and every
// character CheckName refuses replaced by '?': a name Check accepts.
func SanitizeName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if (r == utf8.RuneError && !validAt(s, i)) || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			b.WriteByte('?')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

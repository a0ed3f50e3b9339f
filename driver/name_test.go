package driver

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"", "orders/42", "ресурс/ü/世界/🔒", "a b-c_d.e:f@g", "\uFFFD written", "zwj\u200D", "nbsp\u00A0"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v, want nil", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"a\x00b":        "control character U+0000 at byte 1",
		"tab\t":         "control character U+0009 at byte 3",
		"nl\n":          "control character U+000A at byte 2",
		"del\x7f":       "control character U+007F at byte 3",
		"c1\u0085":      "control character U+0085 at byte 2",
		"c1\u009F":      "control character U+009F at byte 2",
		"alm\u061C":     "bidirectional formatting character U+061C at byte 3",
		"\u200E":        "U+200E at byte 0",
		"\u200F":        "U+200F at byte 0",
		"x\u202A":       "U+202A at byte 1",
		"x\u202E":       "U+202E at byte 1",
		"x\u2066":       "U+2066 at byte 1",
		"x\u2069":       "U+2069 at byte 1",
		"bad\xff":       "byte 3 (0xff) is not valid UTF-8",
		"cut\xe2\x82":   "byte 3 (0xe2) is not valid UTF-8",
		"\xed\xa0\x80s": "byte 0 (0xed) is not valid UTF-8", // a surrogate
	} {
		err := CheckName(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckName(%q): %v, want %q", bad, err, want)
		}
	}
}

// CheckName's shortcut for ASCII refuses exactly what the Unicode rule
// refuses there.
func TestCheckNameASCII(t *testing.T) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		refused := unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
		if err := CheckName("x" + string(r)); (err != nil) != refused {
			t.Errorf("CheckName(%q): %v, want refused %v", "x"+string(r), err, refused)
		}
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "",
		"dlm run /bin/true": "dlm run /bin/true",
		"ü/世界":              "ü/世界",
		"a\x00b\tc\u202Ed":  "a?b?c?d",
		"bad\xff\xfe":       "bad??",
		"cut\xe2\x82":       "cut??",
		"\uFFFD kept":       "\uFFFD kept",
	} {
		got := SanitizeName(in)
		if got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
		if err := CheckName(got); err != nil {
			t.Errorf("CheckName(SanitizeName(%q)): %v", in, err)
		}
	}
}

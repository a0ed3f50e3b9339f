package dlm

import (
	"errors"
	"strings"
	"testing"
)

// Names with control or bidirectional formatting characters are refused
// before any store is asked, naming the character and its position, as
// the dlm server refuses them; other Unicode is fine.
func TestValidateNames(t *testing.T) {
	cfg := defaultConfig()
	for _, ok := range []string{"orders/42", "ресурс/ü/世界/🔒", strings.Repeat("n", MaxResourceBytes)} {
		if err := cfg.validate(ok); err != nil {
			t.Errorf("validate(%q): %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                                      "empty",
		"a\xffb":                                "byte 1 (0xff) is not valid UTF-8",
		"a\x00b":                                "U+0000 at byte 1",
		"tab\there":                             "U+0009 at byte 3",
		"esc\x1b[31m":                           "U+001B at byte 3",
		"c1\u0085":                              "U+0085 at byte 2",
		"\u202Egnp.exe":                         "U+202E at byte 0",
		"iso\u2067late\u2069":                   "U+2067 at byte 3",
		strings.Repeat("n", MaxResourceBytes+1): "513 bytes",
	} {
		err := cfg.validate(name)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("validate(%.20q): %v, want ErrInvalid saying %q", name, err, want)
		}
	}
}

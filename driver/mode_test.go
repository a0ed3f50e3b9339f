package driver_test

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

func TestCompatibilityMatrix(t *testing.T) {
	// Rows: held; columns: requested, in the order NL CR CW PR PW EX.
	want := map[driver.Mode]string{
		driver.NL: "YYYYYY",
		driver.CR: "YYYYYN",
		driver.CW: "YYYNNN",
		driver.PR: "YYNYNN",
		driver.PW: "YYNNNN",
		driver.EX: "YNNNNN",
	}
	for held, row := range want {
		for i, req := range []driver.Mode{driver.NL, driver.CR, driver.CW, driver.PR, driver.PW, driver.EX} {
			if got := req.Compatible(held); got != (row[i] == 'Y') {
				t.Errorf("held %s, requested %s: compatible = %v", held, req, got)
			}
		}
	}
	if driver.Mode(0).Compatible(driver.NL) || driver.NL.Compatible(driver.Mode(9)) {
		t.Error("an invalid mode is compatible with something")
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []driver.Mode{driver.NL, driver.CR, driver.CW, driver.PR, driver.PW, driver.EX} {
		for _, s := range []string{m.String(), string([]byte{m.String()[0] + 32, m.String()[1] + 32})} {
			got, err := driver.ParseMode(s)
			if err != nil || got != m {
				t.Errorf("ParseMode(%q) = %v, %v", s, got, err)
			}
		}
	}
	for _, s := range []string{"", "exclusive", "E", "XX"} {
		if _, err := driver.ParseMode(s); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("ParseMode(%q): err = %v, want ErrInvalid", s, err)
		}
	}
	if s := driver.Mode(42).String(); s != "Mode(42)" {
		t.Errorf("String of an invalid mode = %q", s)
	}
}

// FuzzParseMode: the driver's ParseMode is the lock table's, its errors
// matching ErrInvalid too.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"ex", "PR", "nl", "", "xx", "exclusive", "E\u0301X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := driver.ParseMode(s)
		want, werr := locktable.ParseMode(s)
		if m != want || (err == nil) != (werr == nil) {
			t.Fatalf("ParseMode(%q) = %v, %v; the lock table's gives %v, %v", s, m, err, want, werr)
		}
		if err != nil && (!errors.Is(err, driver.ErrInvalid) || !errors.Is(err, locktable.ErrInvalidMode)) {
			t.Fatalf("ParseMode(%q): %v matches neither ErrInvalid nor ErrInvalidMode", s, err)
		}
	})
}

package driver_test

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/driver"
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

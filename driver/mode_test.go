package driver_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// matrix is the compatibility table of the specification, verbatim.
const matrix = `
held\req NL CR CW PR PW EX
NL        Y  Y  Y  Y  Y  Y
CR        Y  Y  Y  Y  Y  N
CW        Y  Y  Y  N  N  N
PR        Y  Y  N  Y  N  N
PW        Y  Y  N  N  N  N
EX        Y  N  N  N  N  N
`

func TestCompatibilityMatrix(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(matrix), "\n")
	reqs := strings.Fields(lines[0])[1:]
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		held, err := driver.ParseMode(f[0])
		if err != nil {
			t.Fatal(err)
		}
		for i, cell := range f[1:] {
			req, err := driver.ParseMode(reqs[i])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := driver.Compatible(held, req), cell == "Y"; got != want {
				t.Errorf("Compatible(%v, %v) = %v, want %v", held, req, got, want)
			}
			if got := req.Compatible(held); got != driver.Compatible(held, req) {
				t.Errorf("%v.Compatible(%v) = %v, unlike Compatible(%[2]v, %[1]v)", req, held, got)
			}
			if driver.Compatible(held, req) != driver.Compatible(req, held) {
				t.Errorf("matrix not symmetric at %v/%v", held, req)
			}
		}
	}
	if driver.Compatible(0, driver.NL) || driver.Compatible(driver.NL, 7) ||
		driver.Mode(0).Compatible(driver.NL) || driver.NL.Compatible(driver.Mode(9)) {
		t.Error("an invalid mode is compatible with something")
	}
}

func TestParseMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want driver.Mode
	}{{"nl", driver.NL}, {"CR", driver.CR}, {"Cw", driver.CW}, {"pr", driver.PR}, {"pW", driver.PW}, {"EX", driver.EX}} {
		m, err := driver.ParseMode(c.in)
		if err != nil || m != c.want {
			t.Errorf("ParseMode(%q) = %v, %v", c.in, m, err)
		}
		if m.String() != strings.ToUpper(c.in) {
			t.Errorf("%v.String() = %q", m, m.String())
		}
	}
	for _, bad := range []string{"", "E", "XX", "EXX", "null", "exclusive", " EX"} {
		_, err := driver.ParseMode(bad)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("ParseMode(%q) error = %v", bad, err)
		}
	}
	for m, want := range map[driver.Mode]string{0: "Mode(0)", 42: "Mode(42)"} {
		if s := m.String(); s != want {
			t.Errorf("String of an invalid mode = %q, want %q", s, want)
		}
	}
}

func TestModeText(t *testing.T) {
	b, err := json.Marshal(map[string]driver.Mode{"m": driver.PW})
	if err != nil || string(b) != `{"m":"PW"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var v map[string]driver.Mode
	if err := json.Unmarshal([]byte(`{"m":"cr"}`), &v); err != nil || v["m"] != driver.CR {
		t.Fatalf("unmarshal: %v %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"m":"XX"}`), &v); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("unmarshal bad mode: %v", err)
	}
	if _, err := driver.Mode(9).MarshalText(); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("marshal bad mode: %v", err)
	}
}

// FuzzParseMode: ParseMode accepts exactly the six two-letter names, in any
// ASCII case, and its result marshals back to the name; anything else is an
// error matching ErrInvalid, also through UnmarshalText.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"NL", "cr", "Cw", "pR", "PW", "ex", "", "E", "EXX", " ex", "ex\x00", "ſx", "Mode(7)", "\xff", "exclusive", "E\u0301X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := driver.ParseMode(s)
		var u driver.Mode
		uerr := u.UnmarshalText([]byte(s))
		if (err == nil) != (uerr == nil) || u != m {
			t.Fatalf("ParseMode(%q) = %v, %v; UnmarshalText gives %v, %v", s, m, err, u, uerr)
		}
		upper := strings.ToUpper(s)
		known := slices.Contains([]string{"NL", "CR", "CW", "PR", "PW", "EX"}, upper)
		if err != nil {
			if known || !errors.Is(err, driver.ErrInvalid) || m != 0 {
				t.Fatalf("ParseMode(%q) = %v, %v", s, m, err)
			}
			return
		}
		text, merr := m.MarshalText()
		if !known || !m.Valid() || merr != nil || string(text) != upper || m.String() != upper {
			t.Fatalf("ParseMode(%q) = %v (%q, %v)", s, m, text, merr)
		}
	})
}

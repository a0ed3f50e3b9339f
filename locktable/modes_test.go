package locktable

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
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
		held, err := ParseMode(f[0])
		if err != nil {
			t.Fatal(err)
		}
		for i, cell := range f[1:] {
			req, err := ParseMode(reqs[i])
			if err != nil {
				t.Fatal(err)
			}
			if got, want := Compatible(held, req), cell == "Y"; got != want {
				t.Errorf("Compatible(%v, %v) = %v, want %v", held, req, got, want)
			}
			if Compatible(held, req) != Compatible(req, held) {
				t.Errorf("matrix not symmetric at %v/%v", held, req)
			}
		}
	}
	if Compatible(0, NL) || Compatible(NL, 7) {
		t.Error("invalid modes are compatible")
	}
}

// TestMatrixGrants checks the matrix through the table: a request is
// granted at once exactly when it is compatible with the holder.
func TestMatrixGrants(t *testing.T) {
	for held := NL; held <= EX; held++ {
		for req := NL; req <= EX; req++ {
			h := newTest(t, 2, Limits{})
			h.grantedLock(1, "x", held)
			r := h.lock(LockRequest{Session: 2, Resource: "x", Mode: req, Flags: NoQueue})
			if Compatible(held, req) {
				wantStatus(t, r, StatusGranted)
			} else {
				wantErr(t, r, ErrWouldBlock)
			}
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Mode
	}{{"nl", NL}, {"CR", CR}, {"Cw", CW}, {"pr", PR}, {"pW", PW}, {"EX", EX}} {
		m, err := ParseMode(c.in)
		if err != nil || m != c.want {
			t.Errorf("ParseMode(%q) = %v, %v", c.in, m, err)
		}
		if m.String() != strings.ToUpper(c.in) {
			t.Errorf("%v.String() = %q", m, m.String())
		}
	}
	for _, bad := range []string{"", "E", "EXX", "null", "exclusive", " EX"} {
		_, err := ParseMode(bad)
		if !errors.Is(err, ErrInvalidMode) || !strings.Contains(err.Error(), "want one of") {
			t.Errorf("ParseMode(%q) error = %v", bad, err)
		}
	}
	if s := Mode(0).String(); s != "Mode(0)" {
		t.Errorf("Mode(0).String() = %q", s)
	}
	b, err := json.Marshal(map[string]Mode{"m": PW})
	if err != nil || string(b) != `{"m":"PW"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var v map[string]Mode
	if err := json.Unmarshal([]byte(`{"m":"cr"}`), &v); err != nil || v["m"] != CR {
		t.Fatalf("unmarshal: %v %v", v, err)
	}
	if err := json.Unmarshal([]byte(`{"m":"XX"}`), &v); !errors.Is(err, ErrInvalidMode) {
		t.Fatalf("unmarshal bad mode: %v", err)
	}
	if _, err := Mode(9).MarshalText(); !errors.Is(err, ErrInvalidMode) {
		t.Fatalf("marshal bad mode: %v", err)
	}
}

func TestDownConversions(t *testing.T) {
	down := map[[2]Mode]bool{
		{EX, PW}: true, {EX, PR}: true, {EX, CW}: true, {EX, CR}: true, {EX, NL}: true,
		{PW, PR}: true, {PW, CW}: true, {PW, CR}: true, {PW, NL}: true,
		{PR, CR}: true, {PR, NL}: true, {CW, CR}: true, {CW, NL}: true, {CR, NL}: true,
	}
	for from := NL; from <= EX; from++ {
		for to := NL; to <= EX; to++ {
			if from == to {
				continue
			}
			if got := isDownConversion(from, to); got != down[[2]Mode{from, to}] {
				t.Errorf("isDownConversion(%v, %v) = %v", from, to, got)
			}
		}
	}
}

// FuzzParseMode: ParseMode accepts exactly the six two-letter names, in any
// ASCII case, and its result marshals back to the name; anything else is an
// ErrInvalidMode, also through UnmarshalText.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"NL", "cr", "Cw", "pR", "PW", "ex", "", "E", "EXX", " ex", "ex\x00", "ſx", "Mode(7)", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		var u Mode
		uerr := u.UnmarshalText([]byte(s))
		if (err == nil) != (uerr == nil) || u != m {
			t.Fatalf("ParseMode(%q) = %v, %v; UnmarshalText gives %v, %v", s, m, err, u, uerr)
		}
		upper := strings.ToUpper(s)
		known := slices.Contains([]string{"NL", "CR", "CW", "PR", "PW", "EX"}, upper)
		if err != nil {
			if known || !errors.Is(err, ErrInvalidMode) || m != 0 {
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

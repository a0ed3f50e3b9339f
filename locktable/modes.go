package locktable

import (
	"fmt"
	"strings"
)

// Mode is one of the six classic DLM lock modes. The zero value is no mode
// and is rejected by every operation. Packages driver and dlm use this type
// for their modes too.
type Mode uint8

// The six lock modes, from weakest to strongest. PR and CW are not ordered:
// each conflicts with the other.
const (
	// NL (null) grants nothing and blocks nobody; it only holds a place.
	NL Mode = iota + 1
	// CR (concurrent read) lets others read and write.
	CR
	// CW (concurrent write) lets others read and write, but not protect.
	CW
	// PR (protected read) is the classic shared lock: writers wait.
	PR
	// PW (protected write) is the update lock: only CR readers may share it.
	PW
	// EX (exclusive) shares with nobody but NL.
	EX
)

// modeSlots sizes the per-mode arrays, indexed by Mode (slot 0 unused).
const modeSlots = 7

var modeNames = [modeSlots]string{NL: "NL", CR: "CR", CW: "CW", PR: "PR", PW: "PW", EX: "EX"}

// compatible[held][requested] is the DLM compatibility matrix. It is
// symmetric.
var compatible = [modeSlots][modeSlots]bool{
	NL: {NL: true, CR: true, CW: true, PR: true, PW: true, EX: true},
	CR: {NL: true, CR: true, CW: true, PR: true, PW: true},
	CW: {NL: true, CR: true, CW: true},
	PR: {NL: true, CR: true, PR: true},
	PW: {NL: true, CR: true},
	EX: {NL: true},
}

// Derived tables, filled by init from the matrix above.
var (
	// compatMask[m] has bit b set when mode b is compatible with m.
	compatMask [modeSlots]uint8
	// coverMask[w] has bit m set when a holder that yields to a request for
	// m (moves to a mode compatible with m) thereby also yields to w: the
	// modes compatible with m are a subset of those compatible with w.
	coverMask [modeSlots]uint8
)

func init() {
	for h := NL; h <= EX; h++ {
		for r := NL; r <= EX; r++ {
			if compatible[h][r] {
				compatMask[h] |= modeBit(r)
			}
		}
	}
	for w := NL; w <= EX; w++ {
		for m := NL; m <= EX; m++ {
			if compatMask[m]&^compatMask[w] == 0 {
				coverMask[w] |= modeBit(m)
			}
		}
	}
}

// modeBit is the bit of mode m in a mode mask.
func modeBit(m Mode) uint8 { return 1 << m }

// String returns the two-letter name of the mode, such as "EX".
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Valid reports whether m is one of the six modes.
func (m Mode) Valid() bool { return m >= NL && m <= EX }

// ParseMode returns the mode named s, in any case ("ex", "PR", "Cw"...).
// Anything else is an error matching ErrInvalidMode.
func ParseMode(s string) (Mode, error) {
	for m := NL; m <= EX; m++ {
		if strings.EqualFold(s, modeNames[m]) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want one of NL, CR, CW, PR, PW, EX)", ErrInvalidMode, s)
}

// MarshalText implements encoding.TextMarshaler with the two-letter name.
func (m Mode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrInvalidMode, uint8(m))
	}
	return []byte(modeNames[m]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; see ParseMode.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Compatible reports whether a lock requested in mode requested may be
// granted while another lock is held in mode held. It is false if either
// mode is invalid.
func Compatible(held, requested Mode) bool {
	return held.Valid() && requested.Valid() && compatible[held][requested]
}

// Compatible reports whether a lock requested in mode m may be granted while
// another lock is held in mode held: Compatible(held, m).
func (m Mode) Compatible(held Mode) bool { return Compatible(held, m) }

// isDownConversion reports whether converting from mode from to mode to can
// never conflict with anything from was compatible with: every mode
// compatible with from is compatible with to. Such a conversion is granted
// at once and keeps its fencing token. A conversion to the same mode counts.
func isDownConversion(from, to Mode) bool {
	return compatMask[from]&^compatMask[to] == 0
}

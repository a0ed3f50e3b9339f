package driver

import (
	"fmt"
	"strings"
)

// Mode is a lock mode, one of the six classic DLM modes. The zero value is
// no mode; package dlm treats an unset mode as EX.
type Mode uint8

// The six lock modes, from weakest to strongest.
const (
	// NL (null) grants nothing; it only holds a place.
	NL Mode = iota + 1
	// CR (concurrent read) allows others to read and write.
	CR
	// CW (concurrent write) allows others to read and write, not to protect.
	CW
	// PR (protected read) is a shared read lock: writers wait.
	PR
	// PW (protected write) allows concurrent readers (CR) only.
	PW
	// EX (exclusive) allows nobody else but NL.
	EX
)

var modeNames = [...]string{NL: "NL", CR: "CR", CW: "CW", PR: "PR", PW: "PW", EX: "EX"}

// String returns the mode's two-letter name, such as "EX".
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Valid reports whether m is one of the six modes.
func (m Mode) Valid() bool { return m >= NL && m <= EX }

// ParseMode returns the mode named s, in any case ("ex", "PR", ...).
func ParseMode(s string) (Mode, error) {
	for m := NL; m <= EX; m++ {
		if strings.EqualFold(s, modeNames[m]) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown lock mode %q (want one of NL, CR, CW, PR, PW, EX)", ErrInvalid, s)
}

// compatible[held][requested] is the classic DLM compatibility matrix.
var compatible = [7][7]bool{
	NL: {NL: true, CR: true, CW: true, PR: true, PW: true, EX: true},
	CR: {NL: true, CR: true, CW: true, PR: true, PW: true},
	CW: {NL: true, CR: true, CW: true},
	PR: {NL: true, CR: true, PR: true},
	PW: {NL: true, CR: true},
	EX: {NL: true},
}

// Compatible reports whether a lock in mode m may be granted while another
// owner holds one in mode other.
func (m Mode) Compatible(other Mode) bool {
	if !m.Valid() || !other.Valid() {
		return false
	}
	return compatible[other][m]
}

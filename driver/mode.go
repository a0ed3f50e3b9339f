package driver

import (
	"fmt"
	"strings"
)

// Mode is a lock mode, one of the six classic DLM modes, shared by every
// store, the lock table and the dlm server, so that all agree on names,
// values and compatibility. The zero value is no mode: the lock table
// rejects it, and package dlm treats an unset mode as EX.
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

// modeNames are the modes' two-letter names, indexed by Mode (slot 0 unused).
var modeNames = [...]string{NL: "NL", CR: "CR", CW: "CW", PR: "PR", PW: "PW", EX: "EX"}

// compatible[held][requested] is the DLM compatibility matrix. It is
// symmetric.
var compatible = [...][EX + 1]bool{
	NL: {NL: true, CR: true, CW: true, PR: true, PW: true, EX: true},
	CR: {NL: true, CR: true, CW: true, PR: true, PW: true},
	CW: {NL: true, CR: true, CW: true},
	PR: {NL: true, CR: true, PR: true},
	PW: {NL: true, CR: true},
	EX: {NL: true},
}

// String returns the two-letter name of the mode, such as "EX", or
// "Mode(n)" for a value that is not a mode.
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Valid reports whether m is one of the six modes.
func (m Mode) Valid() bool { return m >= NL && m <= EX }

// ParseMode returns the mode named s, in any case ("ex", "PR", "Cw"...).
// Anything else is an error matching ErrInvalid.
func ParseMode(s string) (Mode, error) {
	for m := NL; m <= EX; m++ {
		if strings.EqualFold(s, modeNames[m]) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: lock mode %q (want one of NL, CR, CW, PR, PW, EX)", ErrInvalid, s)
}

// MarshalText implements encoding.TextMarshaler with the two-letter name.
// A value that is not a mode is an error matching ErrInvalid.
func (m Mode) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("%w: lock mode %d", ErrInvalid, uint8(m))
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

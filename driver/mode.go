package driver

import (
	"fmt"

	"github.com/dlmhq/dlm/locktable"
)

// Mode is a lock mode, one of the six classic DLM modes: the lock table's
// own type, so that every store and the server agree on names, values and
// compatibility. The zero value is no mode; package dlm treats an unset mode
// as EX.
type Mode = locktable.Mode

// The six lock modes, from weakest to strongest.
const (
	NL = locktable.NL // null: holds a place, blocks nobody
	CR = locktable.CR // concurrent read
	CW = locktable.CW // concurrent write
	PR = locktable.PR // protected read: shared, writers wait
	PW = locktable.PW // protected write: concurrent readers (CR) only
	EX = locktable.EX // exclusive
)

// ParseMode returns the mode named s, in any case ("ex", "PR", ...); any
// other name is an error matching ErrInvalid.
func ParseMode(s string) (Mode, error) {
	m, err := locktable.ParseMode(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return m, nil
}

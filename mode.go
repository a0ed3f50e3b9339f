package dlm

import "github.com/dlmhq/dlm/driver"

// Mode is a lock mode, one of the six classic DLM modes. Stores that cannot
// provide a mode reject it with ErrUnsupported.
type Mode = driver.Mode

// The six lock modes. EX is the default.
const (
	NL = driver.NL // null: holds a place, blocks nobody
	CR = driver.CR // concurrent read
	CW = driver.CW // concurrent write
	PR = driver.PR // protected read: shared, writers wait
	PW = driver.PW // protected write: concurrent readers (CR) only
	EX = driver.EX // exclusive
)

// ParseMode returns the mode named s, in any case ("ex", "PR", ...).
func ParseMode(s string) (Mode, error) { return driver.ParseMode(s) }

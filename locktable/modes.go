package locktable

import "github.com/dlmhq/dlm/driver"

// The lock modes, their names and their compatibility matrix are package
// driver's (driver.Mode, driver.Compatible); this file derives from them the
// bit masks the table works with.

// modeSlots sizes the per-mode arrays, indexed by driver.Mode (slot 0 unused).
const modeSlots = int(driver.EX) + 1

// Derived tables, filled by init from driver.Compatible. They are read-only
// afterwards.
var (
	// compatMask[m] has bit b set when mode b is compatible with m.
	compatMask [modeSlots]uint8
	// coverMask[w] has bit m set when a holder that yields to a request for
	// m (moves to a mode compatible with m) thereby also yields to w: the
	// modes compatible with m are a subset of those compatible with w.
	coverMask [modeSlots]uint8
)

func init() {
	for h := driver.NL; h <= driver.EX; h++ {
		for r := driver.NL; r <= driver.EX; r++ {
			if driver.Compatible(h, r) {
				compatMask[h] |= modeBit(r)
			}
		}
	}
	for w := driver.NL; w <= driver.EX; w++ {
		for m := driver.NL; m <= driver.EX; m++ {
			if compatMask[m]&^compatMask[w] == 0 {
				coverMask[w] |= modeBit(m)
			}
		}
	}
}

// modeBit is the bit of mode m in a mode mask.
func modeBit(m driver.Mode) uint8 { return 1 << m }

// isDownConversion reports whether converting from mode from to mode to can
// never conflict with anything from was compatible with: every mode
// compatible with from is compatible with to. Such a conversion is granted
// at once and keeps its fencing token. A conversion to the same mode counts.
func isDownConversion(from, to driver.Mode) bool {
	return compatMask[from]&^compatMask[to] == 0
}

// compatible is driver.Compatible for modes known to be valid, read from
// compatMask: the table's hot paths ask it often.
func compatible(held, requested driver.Mode) bool {
	return compatMask[held]&modeBit(requested) != 0
}

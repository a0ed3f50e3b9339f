package locktable

import "fmt"

// MaxTokenFloor is the highest floor RaiseTokens accepts: 2^62. It keeps a
// raised sequence far below 2^63, the bound of a snapshot's last token, so
// that a table raised to it can still issue about 4.6e18 tokens.
const MaxTokenFloor = 1 << 62

// RaiseTokens raises the fencing-token sequence so that every token issued
// after it is greater than floor: the last token becomes max(last token,
// floor). It never lowers the sequence, so a floor at or below the last
// token changes nothing. It advances the table clock to st.Now, as every
// mutating operation does, and times nothing out. A floor above
// MaxTokenFloor fails with ErrTokenFloor and changes nothing. It returns
// the last token after the raise.
//
// A store restored from an older copy of its state calls it with a floor
// above every token the copy's later history can have issued, so that no
// token is issued twice.
func (t *Table) RaiseTokens(st Stamp, floor uint64) (uint64, error) {
	if floor > MaxTokenFloor {
		return t.lastToken, fmt.Errorf("%w: floor %d is above MaxTokenFloor %d", ErrTokenFloor, floor, uint64(MaxTokenFloor))
	}
	t.begin(st)
	t.lastToken = max(t.lastToken, floor)
	return t.lastToken, nil
}

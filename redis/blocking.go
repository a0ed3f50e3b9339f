package redis

import (
	"sync"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Featurer = (*Store)(nil)

// Features returns driver.FeatureBlocking: grants carry a Blocking channel
// (see the package documentation for when it is closed).
func (s *Store) Features() driver.Feature { return driver.FeatureBlocking }

// holding is the store's state for one grant (driver.Grant.Handle): its
// Blocking channel.
type holding struct {
	blocking chan struct{}
	once     sync.Once
}

// newGrant returns a grant of token whose Blocking channel is closed
// already if waiting (live waiters queue behind it).
func newGrant(token uint64, waiting bool) driver.Grant {
	h := &holding{blocking: make(chan struct{})}
	if waiting {
		h.block()
	}
	return driver.Grant{Token: token, Handle: h, Blocking: h.blocking}
}

// block closes the Blocking channel, once.
func (h *holding) block() { h.once.Do(func() { close(h.blocking) }) }

// blocked closes the Blocking channel of g, if g is a grant of this store.
func blocked(g driver.Grant) {
	if h, ok := g.Handle.(*holding); ok {
		h.block()
	}
}

// isBlocked reports whether the Blocking channel of g, a grant of this
// store, is closed already.
func isBlocked(g driver.Grant) bool {
	h, ok := g.Handle.(*holding)
	if !ok {
		return false
	}
	select {
	case <-h.blocking:
		return true
	default:
		return false
	}
}

package dlmserver

import (
	"time"

	"github.com/dlmhq/dlm/driver"
)

// ValidUntil returns until when the session that holds g is known to live:
// the sending time of its last acknowledged keepalive plus the session TTL,
// less the drift allowance. Extend succeeds without a round trip while the
// session lives, so a lease's own deadline (the extend's start plus the
// lock's TTL) can run past it; dlm.Lease.Deadline takes the sooner of the
// two. It is the zero time once the lock is gone. See driver.Validator.
func (s *Store) ValidUntil(req driver.Request, g driver.Grant) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.held(req, g)
	if ls == nil || ls.gone || !ls.granted || s.st.sid == 0 {
		return time.Time{}
	}
	return s.st.validUntil
}

var _ driver.Validator = (*Store)(nil)

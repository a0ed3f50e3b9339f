package memory

import (
	"time"

	"github.com/dlmhq/dlm/locktable"
)

// arm sets the store's one timer to the next moment something is due: a
// TTL running out or a wait deadline passing.
func (s *Store) arm() {
	if s.closed {
		return
	}
	next, ok := s.tab.NextDeadline()
	if s.expiry.Len() > 0 && (!ok || s.expiry.Min().expires < next) {
		next, ok = s.expiry.Min().expires, true
	}
	if !ok {
		s.timer.Stop()
		return
	}
	s.timer.Reset(time.Duration(next - s.now().Now))
}

// tick ends the acquisitions whose TTL ran out and times out the requests
// whose deadline passed, then re-arms the timer. An ungrouped acquisition's
// session is expired; a group's lock is released alone, its group's other
// locks staying held.
func (s *Store) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	st := s.now()
	var ids []locktable.SessionID
	var grouped []*entry
	for s.expiry.Len() > 0 && s.expiry.Min().expires <= st.Now {
		e := s.expiry.Min()
		s.expiry.Remove(e)
		if e.group == nil {
			ids = append(ids, e.session)
		} else {
			grouped = append(grouped, e)
		}
	}
	if len(ids) > 0 {
		res := s.tab.ExpireSessions(st, ids)
		s.dispatch(res.Events)
	}
	for _, e := range grouped {
		s.finish(e, outcome{err: expired(e.res)})
		s.forget(e)
		s.unlock(e)
	}
	res := s.tab.Advance(s.now())
	s.dispatch(res.Events)
	s.arm()
}

// Before orders granted acquisitions by the end of their TTL, for the
// store's expiry heap.
func (e *entry) Before(other *entry) bool { return e.expires < other.expires }

// Slot is the entry's place in the store's expiry heap.
func (e *entry) Slot() *int { return &e.index }

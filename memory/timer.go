package memory

import (
	"container/heap"
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
	if len(s.expiry) > 0 && (!ok || s.expiry[0].expires < next) {
		next, ok = s.expiry[0].expires, true
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
	for len(s.expiry) > 0 && s.expiry[0].expires <= st.Now {
		e := s.expiry[0]
		s.expiry.remove(e)
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

// expiryHeap orders granted acquisitions by the end of their TTL.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// set adds e or moves it to its new place.
func (h *expiryHeap) set(e *entry) {
	if e.index >= 0 {
		heap.Fix(h, e.index)
		return
	}
	heap.Push(h, e)
}

// remove takes e out, if it is in.
func (h *expiryHeap) remove(e *entry) {
	if e.index >= 0 {
		heap.Remove(h, e.index)
	}
}

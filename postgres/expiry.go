package postgres

import (
	"sync"
	"time"

	"github.com/dlmhq/dlm/internal/indexheap"
)

// expiries unlocks the store's locks whose TTL passed without an extension
// (lock.expire), with one timer for all of them, armed for the earliest
// expiry. A grant thus starts no timer of its own: adding a timer earlier
// than any other wakes the runtime's network poller, a cost a lock cycle
// would pay twice. A lock released or lost leaves the heap; the timer stays
// armed for it, and when it fires it arms itself for the earliest one left.
type expiries struct {
	mu    sync.Mutex
	locks indexheap.Heap[*lock]
	timer *time.Timer
	at    time.Time // when the timer fires; zero when it is not armed
}

// set moves l's expiry to due, adding l when it is not there.
func (e *expiries) set(l *lock, due time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l.due = due
	e.locks.Set(l)
	if e.at.IsZero() || due.Before(e.at) {
		e.armLocked(due)
	}
}

// remove takes l out, when it is there.
func (e *expiries) remove(l *lock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.locks.Remove(l)
}

func (e *expiries) armLocked(due time.Time) {
	e.at = due
	d := time.Until(due)
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.fire)
		return
	}
	e.timer.Reset(d)
}

// fire expires the locks that are due, each in a goroutine of its own (an
// unlock may wait for its session), and arms the timer for the next.
func (e *expiries) fire() {
	now := time.Now()
	var due []*lock
	e.mu.Lock()
	for e.locks.Len() > 0 && !e.locks.Min().due.After(now) {
		l := e.locks.Min()
		e.locks.Remove(l)
		due = append(due, l)
	}
	e.at = time.Time{}
	if e.locks.Len() > 0 {
		e.armLocked(e.locks.Min().due)
	}
	e.mu.Unlock()
	for _, l := range due {
		go l.expire()
	}
}

// Before orders locks by expiry, for expiries.locks.
func (l *lock) Before(other *lock) bool { return l.due.Before(other.due) }

// Slot is the lock's place among the store's expiries.
func (l *lock) Slot() *int { return &l.slot }

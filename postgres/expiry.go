package postgres

import (
	"container/heap"
	"sync"
	"time"
)

// expiries unlocks the store's locks whose TTL passed without an extension
// (lock.expire), with one timer for all of them, armed for the earliest
// expiry. A grant thus starts no timer of its own: adding a timer earlier
// than any other wakes the runtime's network poller, a cost a lock cycle
// would pay twice. A lock released or lost leaves the heap; the timer stays
// armed for it, and when it fires it arms itself for the earliest one left.
type expiries struct {
	mu    sync.Mutex
	locks lockHeap
	timer *time.Timer
	at    time.Time // when the timer fires; zero when it is not armed
}

// set moves l's expiry to due, adding l when it is not there.
func (e *expiries) set(l *lock, due time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l.due = due
	if l.slot < 0 {
		heap.Push(&e.locks, l)
	} else {
		heap.Fix(&e.locks, l.slot)
	}
	if e.at.IsZero() || due.Before(e.at) {
		e.armLocked(due)
	}
}

// remove takes l out, when it is there.
func (e *expiries) remove(l *lock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.slot >= 0 {
		heap.Remove(&e.locks, l.slot)
	}
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
	for len(e.locks) > 0 && !e.locks[0].due.After(now) {
		due = append(due, heap.Pop(&e.locks).(*lock))
	}
	e.at = time.Time{}
	if len(e.locks) > 0 {
		e.armLocked(e.locks[0].due)
	}
	e.mu.Unlock()
	for _, l := range due {
		go l.expire()
	}
}

// lockHeap orders locks by expiry; each knows its place (lock.slot, -1
// when out of the heap). Guarded by expiries.mu.
type lockHeap []*lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}

func (h *lockHeap) Push(x any) {
	l := x.(*lock)
	l.slot = len(*h)
	*h = append(*h, l)
}

func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.slot = -1
	return l
}

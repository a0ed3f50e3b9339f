// Package alarm runs functions at chosen moments, any number of them on one
// runtime timer.
//
// Every time.AfterFunc and context.WithTimeout arms a timer of the Go
// runtime, and arming one that comes first on its processor makes the
// runtime wake a thread to notice it. A lock client sets several such
// deadlines per acquisition (an attempt's bound, a call's timeout, a
// lease's expiry), and stops almost all of them long before they are due;
// on a machine whose cores are busy, the wake-ups cost more than the work
// they bound. A Clock keeps its alarms in a heap and arms its one timer for
// the earliest, and only when the earliest moves earlier: alarms that are
// set and stopped in turn, later each time, arm nothing, and the timer fires
// once for the whole run of them.
//
// Package dlm keeps a Clock per client for its attempts' bounds and its
// leases' deadlines, and dlm's stores one each for their calls' timeouts;
// a store of another module may use it the same way. It imports nothing
// of dlm. Its API is not yet covered by dlm's compatibility promises
// (docs/compatibility.md).
package alarm

import (
	"container/heap"
	"sync"
	"time"
)

// Clock holds alarms. The zero value is ready to use, and a Clock must not
// be copied after first use. It starts no goroutine of its own: when its
// timer fires, each alarm that is due runs in a goroutine of its own, as
// with time.AfterFunc, and a timer that fires for nothing (its alarm was
// stopped) arms itself again for the next or ends.
type Clock struct {
	mu     sync.Mutex
	alarms alarms
	timer  *time.Timer // nil until the first alarm
	armed  time.Time   // when timer fires; zero when it is not armed
}

// Alarm is a function set to run at a moment.
type Alarm struct {
	c    *Clock
	f    func()
	when time.Time
	slot int // the alarm's place in c.alarms; -1 when not in it
}

// At sets f to run, in a goroutine of its own, at when (at once if when has
// passed), and returns the alarm.
func (c *Clock) At(when time.Time, f func()) *Alarm {
	a := &Alarm{c: c, f: f, when: when, slot: -1}
	c.mu.Lock()
	heap.Push(&c.alarms, a)
	c.armLocked()
	c.mu.Unlock()
	return a
}

// After sets f to run, in a goroutine of its own, once d has passed.
func (c *Clock) After(d time.Duration, f func()) *Alarm {
	return c.At(time.Now().Add(d), f)
}

// Stop keeps the alarm from running. It reports whether it did so: false
// when the alarm was stopped already or its function has been started.
func (a *Alarm) Stop() bool {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.slot < 0 {
		return false
	}
	heap.Remove(&c.alarms, a.slot)
	// The timer stays armed: if nothing else is due then, it finds so
	// when it fires, once, instead of a disarm and a rearm per alarm.
	return true
}

// Reset sets the alarm to run at when, whether it was pending, stopped or
// has run, and reports whether it was pending.
func (a *Alarm) Reset(when time.Time) bool {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := a.slot >= 0
	a.when = when
	if pending {
		heap.Fix(&c.alarms, a.slot)
	} else {
		heap.Push(&c.alarms, a)
	}
	c.armLocked()
	return pending
}

// armLocked makes the timer fire no later than the earliest alarm, arming
// it only when it is not armed or is armed for a later moment.
func (c *Clock) armLocked() {
	if len(c.alarms) == 0 {
		return
	}
	first := c.alarms[0].when
	if !c.armed.IsZero() && !first.Before(c.armed) {
		return
	}
	c.armed = first
	if c.timer == nil {
		c.timer = time.AfterFunc(time.Until(first), c.fire)
		return
	}
	c.timer.Reset(time.Until(first))
}

// fire runs when the timer fires: it starts every alarm that is due and
// arms the timer for the next.
func (c *Clock) fire() {
	now := time.Now()
	var due []func()
	c.mu.Lock()
	c.armed = time.Time{}
	for len(c.alarms) > 0 && !c.alarms[0].when.After(now) {
		due = append(due, heap.Pop(&c.alarms).(*Alarm).f)
	}
	c.armLocked()
	c.mu.Unlock()
	for i, f := range due {
		if i == len(due)-1 {
			f() // this goroutine is the timer's own: the last one runs here
			break
		}
		go f()
	}
}

// alarms is a heap of alarms, the earliest first, each knowing its place.
type alarms []*Alarm

func (h alarms) Len() int           { return len(h) }
func (h alarms) Less(i, j int) bool { return h[i].when.Before(h[j].when) }

func (h alarms) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = i, j
}

func (h *alarms) Push(x any) {
	a := x.(*Alarm)
	a.slot = len(*h)
	*h = append(*h, a)
}

func (h *alarms) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	a.slot = -1
	return a
}

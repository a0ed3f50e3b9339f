package locktable

import "github.com/dlmhq/dlm/driver"

// This file holds the queueing rules: entering and leaving the queues,
// granting from the queue heads, and blocking notices.

// enqueue puts pending request l at the tail of its queue. l.state
// (stateWaiting or stateConverting) and l.want are already set.
func (t *Table) enqueue(l *lock, deadline int64) {
	r := l.res
	if r.q == nil {
		r.q = t.newQueues()
	}
	r.queueOf(l).pushBack(l, linkQueue)
	if r.kind == KindLock {
		r.q.want[l.want]++
	}
	l.queuedAt, l.deadline = t.now, deadline
	if deadline != 0 {
		t.deadlines.push(l)
	}
	t.addPending(l)
	t.nPending++
}

// dequeue takes pending request l out of its queue, the deadline heap and
// its owner's pending list. The caller then changes l.state.
func (t *Table) dequeue(l *lock) {
	r := l.res
	r.queueOf(l).remove(l, linkQueue)
	if r.kind == KindLock {
		r.q.want[l.want]--
	}
	if r.q.conv.n == 0 && r.q.wait.n == 0 {
		t.recycleQueues(r.q)
		r.q = nil
	}
	if l.heapIdx >= 0 {
		t.deadlines.remove(l)
	}
	t.removePending(l)
	l.queuedAt, l.deadline = 0, 0
	t.nPending--
}

// newQueues returns empty queues.
func (t *Table) newQueues() *queues {
	if n := len(t.freeQs); n > 0 {
		q := t.freeQs[n-1]
		t.freeQs = t.freeQs[:n-1]
		return q
	}
	return new(queues)
}

// recycleQueues recycles empty queues.
func (t *Table) recycleQueues(q *queues) {
	*q = queues{}
	if len(t.freeQs) < maxFree {
		t.freeQs = append(t.freeQs, q)
	}
}

// grantPending grants from the queue heads of r as far as the rules allow:
// the conversion queue first, strictly in order, then, once no conversion
// is queued, the wait queue in order. It stops at the first head that
// cannot be granted. A head whose deadline has passed is timed out on the
// way, so nothing is ever granted after its deadline.
func (t *Table) grantPending(r *resource) {
	for r.q != nil {
		h := r.q.conv.head
		if h == nil {
			h = r.q.wait.head
		}
		if h.deadline != 0 && h.deadline <= t.now {
			t.abortRequest(h, EventTimedOut, ReasonNone)
			continue
		}
		switch {
		case r.kind == KindSemaphore:
			if !r.fits(h.permits) {
				return
			}
		case h.state == stateConverting:
			if !r.compatibleConv(h, h.want) {
				return
			}
		default:
			if !r.compatibleNew(h.want) {
				return
			}
		}
		t.dequeue(h)
		if h.state == stateConverting {
			t.convert(h, h.want)
		} else {
			t.grant(h)
		}
	}
}

// grant grants request l (new, not queued) in mode l.want.
func (t *Table) grant(l *lock) {
	l.state = stateGranted
	l.mode, l.want = l.want, 0
	l.token = t.issueToken()
	l.grantedAt = t.now
	l.notified = 0
	l.res.addGranted(l)
	t.emitLock(EventGranted, l, l.mode, ReasonNone, false)
	t.fresh = append(t.fresh, l)
}

// convert changes granted lock l (not queued) to mode m. Every conversion
// but a down-conversion gets a new fencing token. The blocking-notice
// memory is reset: the holder is asked again about its new mode.
func (t *Table) convert(l *lock, m driver.Mode) {
	down := isDownConversion(l.mode, m)
	l.res.setMode(l, m)
	l.state, l.want = stateGranted, 0
	if !down {
		l.token = t.issueToken()
	}
	l.grantedAt = t.now
	l.notified = 0
	t.emitLock(EventGranted, l, m, ReasonNone, true)
	t.fresh = append(t.fresh, l)
}

// abortRequest ends pending request l without granting it, with an event of
// the given kind (EventCancelled or EventTimedOut). A new request is
// deleted; a conversion leaves the lock granted in its old mode.
func (t *Table) abortRequest(l *lock, kind EventKind, reason Reason) {
	conv := l.state == stateConverting
	t.emitLock(kind, l, l.want, reason, conv)
	t.dequeue(l)
	t.touch(l.res)
	if conv {
		l.state, l.want = stateGranted, 0
	} else {
		t.freeLock(l)
	}
}

// releaseLock deletes granted lock l, and its queued conversion if any.
func (t *Table) releaseLock(l *lock, reason Reason) {
	r := l.res
	if l.state == stateConverting {
		t.dequeue(l)
	}
	t.emitLock(EventReleased, l, l.mode, reason, false)
	r.removeGranted(l)
	t.touch(r)
	t.freeLock(l)
}

// dropLock deletes lock l whatever its state.
func (t *Table) dropLock(l *lock, reason Reason) {
	if l.state == stateWaiting {
		t.abortRequest(l, EventCancelled, reason)
	} else {
		t.releaseLock(l, reason)
	}
}

// notifyBlockers sends blocking notices to the holders that block a request
// just queued on r: for mode want (locks; self is the converting lock, not
// notified) or for permits (semaphores).
func (t *Table) notifyBlockers(r *resource, self *lock, want driver.Mode, permits uint32) {
	if r.kind == KindSemaphore {
		if r.fits(permits) {
			return // only the queue order holds it back
		}
		for h := r.granted.head; h != nil; h = h.link[linkGranted].next {
			t.notifySemaphore(h, permits)
		}
		return
	}
	for h := r.granted.head; h != nil; h = h.link[linkGranted].next {
		if h != self && !compatible(h.mode, want) {
			t.notify(h, want)
		}
	}
}

// notifyHolder sends blocking notices to granted lock h for every queued
// request of its resource that h blocks. It is used for locks that were
// just granted or converted while requests stay queued.
func (t *Table) notifyHolder(h *lock) {
	r := h.res
	if r.kind == KindSemaphore {
		t.notifySemaphore(h, r.q.wait.head.permits)
		return
	}
	for m := driver.NL; m <= driver.EX; m++ {
		if r.q.want[m] > 0 && !compatible(h.mode, m) {
			t.notify(h, m)
		}
	}
}

// notify tells holder h that a request for mode m waits on it, unless an
// earlier notice already covers m (see coverMask).
func (t *Table) notify(h *lock, m driver.Mode) {
	if h.notified&coverMask[m] != 0 {
		return
	}
	h.notified |= modeBit(m)
	t.emitLock(EventBlocking, h, m, ReasonNone, false)
}

// notifySemaphore tells semaphore holder h, once per grant, that a request
// for permits waits.
func (t *Table) notifySemaphore(h *lock, permits uint32) {
	if h.notified != 0 {
		return
	}
	h.notified = 1
	t.emitLock(EventBlocking, h, 0, ReasonNone, false)
	t.events[len(t.events)-1].Permits = permits
}

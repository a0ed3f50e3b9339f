package server

import (
	"sync"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// maxMailboxEvents bounds the events a unary session keeps for its next
// KeepAlive; past it the oldest are dropped. Each lock adds at most one
// grant or time-out per request and one blocking notice until the next
// KeepAlive, so only a client that takes many locks without keepalives
// reaches it.
const maxMailboxEvents = 1024

// A mailbox is a unary session's place in the hub, where a session stream
// has its outbox: the hub pushes it the session's lock events in log order,
// from the state machine's observer, and it never blocks. It hands grants
// and time-outs to the calls that wait for them (see watch), and keeps the
// rest for the next KeepAlive: grants and time-outs no call waited for,
// and blocking notices. Answers to requests are not its business: a unary
// call gets its own from the node. It lives on the leader only, from the
// session's first unary call until the session ends, another node leads,
// or a stream resumes the session (which ends it, as a newer stream ends
// an older one).
type mailbox struct {
	sid locktable.SessionID

	mu     sync.Mutex
	err    error         // why it ended; nil while open
	done   chan struct{} // closed when it ends
	waits  map[lockKey]*lockWait
	events []*dlmpb.LockEvent // for the next KeepAlive, oldest first
	// grants are the new requests' grants answered or being withdrawn (see
	// unary.handOver), until their locks are released.
	grants map[uint64]*handout
}

// handout is the fate of a grant of a new request: the calls that answered
// it and whose delivery is not known to have failed, or its withdrawal.
type handout struct {
	answered  int
	withdrawn bool
}

// lockKey names what a call waits for: a lock's new request, or its
// conversion.
type lockKey struct {
	lock       uint64
	conversion bool
}

// lockWait is the outcome calls wait for: ready is closed once ev (a grant
// or a time-out) is set.
type lockWait struct {
	ready    chan struct{}
	ev       *dlmpb.LockEvent
	watchers int
}

func newMailbox(sid locktable.SessionID) *mailbox {
	return &mailbox{sid: sid, done: make(chan struct{}), waits: make(map[lockKey]*lockWait), grants: make(map[uint64]*handout)}
}

// watch registers a call waiting for the outcome of k. Register before
// reading the lock's state: an outcome applied after that read reaches the
// returned wait. Events of k kept for KeepAlive are dropped: the caller
// answers from the state it reads.
func (m *mailbox) watch(k lockKey) *lockWait {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropEvents(k.lock, func(e *dlmpb.LockEvent) bool {
		return e.GetConversion() == k.conversion && e.GetKind() != dlmpb.LockEvent_KIND_BLOCKING
	})
	w := m.waits[k]
	if w == nil {
		w = &lockWait{ready: make(chan struct{})}
		m.waits[k] = w
	}
	w.watchers++
	return w
}

// unwatch ends a call's wait; it reports whether the call was the last
// one waiting on k.
func (m *mailbox) unwatch(k lockKey, w *lockWait) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.watchers--
	if w.watchers > 0 {
		return false
	}
	if m.waits[k] == w {
		delete(m.waits, k)
	}
	return true
}

// takeEvents returns the events kept for KeepAlive and forgets them.
func (m *mailbox) takeEvents() []*dlmpb.LockEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := m.events
	m.events = nil
	return evs
}

// forget drops what is kept about lock (it was released).
func (m *mailbox) forget(lock uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropEvents(lock, func(*dlmpb.LockEvent) bool { return true })
}

// ended returns why the mailbox ended, nil while it is open.
func (m *mailbox) ended() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// push takes the session's messages from the hub (see sink).
func (m *mailbox) push(msgs ...*dlmpb.SessionResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range msgs {
		switch x := msg.GetMsg().(type) {
		case *dlmpb.SessionResponse_Granted:
			if g := x.Granted; g.GetId() == nil { // an answer has an id: its call has it already
				m.outcome(&dlmpb.LockEvent{Kind: dlmpb.LockEvent_KIND_GRANTED, LockId: g.GetLockId(), Token: g.GetToken(),
					Mode: g.GetMode(), Permits: g.GetPermits(), Conversion: g.GetConversion()})
			}
		case *dlmpb.SessionResponse_TimedOut:
			t := x.TimedOut
			if !t.GetConversion() {
				delete(m.grants, t.GetLockId())
			}
			m.outcome(&dlmpb.LockEvent{Kind: dlmpb.LockEvent_KIND_TIMED_OUT, LockId: t.GetLockId(), Mode: t.GetMode(), Conversion: t.GetConversion()})
		case *dlmpb.SessionResponse_Cancelled:
			c := x.Cancelled // withdrawn by this session: a waiting call hears it as a time-out
			if !c.GetConversion() {
				delete(m.grants, c.GetLockId())
			}
			if w := m.waits[lockKey{c.GetLockId(), c.GetConversion()}]; w != nil && w.ev == nil {
				w.ev = &dlmpb.LockEvent{Kind: dlmpb.LockEvent_KIND_TIMED_OUT, LockId: c.GetLockId(), Mode: c.GetMode(), Conversion: c.GetConversion()}
				close(w.ready)
			}
		case *dlmpb.SessionResponse_Released:
			m.dropEvents(x.Released.GetLockId(), func(*dlmpb.LockEvent) bool { return true })
			delete(m.grants, x.Released.GetLockId())
		case *dlmpb.SessionResponse_Blocking:
			b := x.Blocking
			if !m.hasEvent(b.GetLockId(), dlmpb.LockEvent_KIND_BLOCKING) { // one notice per lock until reported
				m.keep(&dlmpb.LockEvent{Kind: dlmpb.LockEvent_KIND_BLOCKING, LockId: b.GetLockId(), Mode: b.GetMode(), Permits: b.GetPermits()})
			}
		}
	}
}

// handOut records that a call answers the grant of k; it reports false
// if the grant is being withdrawn (it must then be answered to nobody).
// Conversions are not recorded: withdrawing one takes nothing back.
func (m *mailbox) handOut(k lockKey) bool {
	if k.conversion {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.grants[k.lock]
	if h == nil {
		h = &handout{}
		m.grants[k.lock] = h
	}
	if h.withdrawn {
		return false
	}
	h.answered++
	return true
}

// giveBack records that the answer of a call that handed out the grant of
// k did not reach its client; it reports whether the caller is to withdraw
// it: no other call's answer of it may have.
func (m *mailbox) giveBack(k lockKey) bool {
	if k.conversion {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.grants[k.lock]
	if h == nil || h.withdrawn {
		return false
	}
	if h.answered--; h.answered > 0 {
		return false
	}
	h.withdrawn = true
	return true
}

// claimWithdraw records that a call whose client is gone withdraws k; it
// reports false if another call answered k's grant (which then stands) or
// the withdrawal is under way.
func (m *mailbox) claimWithdraw(k lockKey) bool {
	if k.conversion {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.grants[k.lock]
	if h == nil {
		h = &handout{}
		m.grants[k.lock] = h
	}
	if h.withdrawn || h.answered > 0 {
		return false
	}
	h.withdrawn = true
	return true
}

// keepGrant keeps grant e for the next KeepAlive: a grant answered to a
// call whose client did not hear it.
func (m *mailbox) keepGrant(e *dlmpb.LockEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keep(e)
}

// outcome hands a grant or time-out to the calls waiting for it, or keeps
// it for KeepAlive. The caller holds m.mu.
func (m *mailbox) outcome(e *dlmpb.LockEvent) {
	if w := m.waits[lockKey{e.GetLockId(), e.GetConversion()}]; w != nil && w.ev == nil {
		w.ev = e
		close(w.ready)
		return
	}
	m.keep(e)
}

// keep adds e to the events for KeepAlive. The caller holds m.mu.
func (m *mailbox) keep(e *dlmpb.LockEvent) {
	if len(m.events) >= maxMailboxEvents {
		m.events = m.events[1:]
	}
	m.events = append(m.events, e)
}

// hasEvent reports whether an event of kind about lock is kept. The caller
// holds m.mu.
func (m *mailbox) hasEvent(lock uint64, kind dlmpb.LockEvent_Kind) bool {
	for _, e := range m.events {
		if e.GetLockId() == lock && e.GetKind() == kind {
			return true
		}
	}
	return false
}

// dropEvents removes the kept events of lock that match. The caller holds
// m.mu.
func (m *mailbox) dropEvents(lock uint64, match func(*dlmpb.LockEvent) bool) {
	kept := m.events[:0]
	for _, e := range m.events {
		if e.GetLockId() != lock || !match(e) {
			kept = append(kept, e)
		}
	}
	clear(m.events[len(kept):])
	m.events = kept
}

// pushWarning drops warnings: a unary client has no stream to read them.
func (m *mailbox) pushWarning(*dlmpb.SessionResponse) {}

// end ends the mailbox: the calls waiting on it are told err (nil: the
// session ended).
func (m *mailbox) end(_ bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isOver() {
		return
	}
	if err == nil {
		err = errSessionEnded
	}
	m.err = err
	close(m.done)
}

func (m *mailbox) isOver() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

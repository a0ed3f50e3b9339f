package server

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// liveness is the leader's record of when each session dies without a
// keepalive. It is not replicated: keepalives never reach the log. Deadlines
// are monotonic clock readings. When one passes, the leader proposes an
// ExpireSessions entry; the session's locks move only when it applies.
//
// It is active only on a leader that has applied its whole log and reset
// every deadline (see activate); inactive, it refuses keepalives.
type liveness struct {
	kick chan struct{} // capacity 1: the earliest deadline may have moved

	mu       sync.Mutex
	active   bool
	sessions map[locktable.SessionID]*liveSession
	queue    deadlineQueue // lazy: entries whose deadline is stale are skipped
}

type liveSession struct {
	ttl      time.Duration
	deadline time.Time
	expiring bool // its expiry was proposed: keepalives are no longer taken
}

func newLiveness() *liveness {
	return &liveness{kick: make(chan struct{}, 1), sessions: make(map[locktable.SessionID]*liveSession)}
}

// activate starts tracking: every open session gets the deadline now + its
// TTL + margin, so that no session dies for keepalives a previous leader
// received, or that arrived while no leader could take them.
func (l *liveness) activate(open []fsm.SessionMeta, now time.Time, margin time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = true
	l.sessions = make(map[locktable.SessionID]*liveSession, len(open))
	l.queue = l.queue[:0]
	for _, s := range open {
		l.setLocked(s.ID, s.TTL, promotionDeadline(now, s.TTL, margin))
	}
	l.poke()
}

// deactivate stops tracking (on loss of leadership).
func (l *liveness) deactivate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = false
	l.sessions = make(map[locktable.SessionID]*liveSession)
	l.queue = nil
}

// isActive reports whether the node tracks sessions (is a serving leader).
func (l *liveness) isActive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// touch records a keepalive of session sid received at now: it lives until
// now + TTL. It reports false when inactive or when the session is unknown
// (expired, expiring, or not yet applied).
func (l *liveness) touch(sid locktable.SessionID, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[sid]
	if !l.active || s == nil || s.expiring {
		return 0, false
	}
	l.setLocked(sid, s.ttl, now.Add(s.ttl))
	return s.ttl, true
}

// deadline returns when session sid dies without a keepalive, if this node
// tracks it (it is the serving leader).
func (l *liveness) deadline(sid locktable.SessionID) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[sid]
	if !l.active || s == nil {
		return time.Time{}, false
	}
	return s.deadline, true
}

// track follows the sessions that an applied command opens and ends.
// Sessions opened by this leader count from the moment they apply.
func (l *liveness) track(c *dlmpb.Command, r *fsm.Result) {
	var ended []uint64 // sessions the command ends, known or not
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_ExpireSessions:
		ended = op.ExpireSessions.GetSessions()
	case *dlmpb.Command_CloseSession:
		ended = []uint64{op.CloseSession.GetSession()}
	}
	open, isOpen := c.GetOp().(*dlmpb.Command_OpenSession)
	if !isOpen && len(r.Events) == 0 && len(ended) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active {
		return
	}
	_, isClose := c.GetOp().(*dlmpb.Command_CloseSession)
	for _, id := range ended { // including ids already gone: no retry loop
		if !isClose || r.Err == nil || errors.Is(r.Err, locktable.ErrUnknownSession) {
			delete(l.sessions, locktable.SessionID(id))
		}
	}
	if isOpen && r.Err == nil && !r.Duplicate {
		ttl := time.Duration(open.OpenSession.GetTtlNanos())
		l.setLocked(r.Session, ttl, time.Now().Add(ttl))
		l.poke()
	}
	for i := range r.Events {
		switch e := &r.Events[i]; e.Kind {
		case locktable.EventSessionClosed, locktable.EventSessionExpired:
			delete(l.sessions, e.Session)
		}
	}
}

// expired returns the sessions whose deadline is at or before now, and the
// next deadline after now (zero if none).
func (l *liveness) expired(now time.Time) ([]locktable.SessionID, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []locktable.SessionID
	for len(l.queue) > 0 {
		top := l.queue[0]
		s := l.sessions[top.sid]
		if s == nil || !s.deadline.Equal(top.at) {
			heap.Pop(&l.queue) // stale entry
			continue
		}
		if top.at.After(now) {
			return ids, top.at
		}
		heap.Pop(&l.queue)
		ids = append(ids, top.sid)
		// Keep it until the expiry applies, retrying if the proposal
		// fails; a late keepalive must not revive it, since its client
		// may already be told it is gone.
		s.expiring = true
		s.deadline = now.Add(time.Second)
		heap.Push(&l.queue, deadlineEntry{sid: top.sid, at: s.deadline})
	}
	return ids, time.Time{}
}

// setLocked sets a session's deadline and queues it.
func (l *liveness) setLocked(sid locktable.SessionID, ttl time.Duration, at time.Time) {
	s := l.sessions[sid]
	if s == nil {
		s = &liveSession{}
		l.sessions[sid] = s
	}
	s.ttl, s.deadline = ttl, at
	heap.Push(&l.queue, deadlineEntry{sid: sid, at: at})
}

// poke wakes the leader loop to look at the deadlines again.
func (l *liveness) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// deadlineEntry is one (possibly stale) deadline of a session.
type deadlineEntry struct {
	sid locktable.SessionID
	at  time.Time
}

// deadlineQueue is a min-heap of deadlines.
type deadlineQueue []deadlineEntry

func (q deadlineQueue) Len() int           { return len(q) }
func (q deadlineQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q deadlineQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *deadlineQueue) Push(x any)        { *q = append(*q, x.(deadlineEntry)) }
func (q *deadlineQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

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
// keepalive. Keepalives are not logged: deadlines are monotonic clock
// readings of this node. When one passes, the leader proposes an
// ExpireSessions entry; the session's locks move only when it applies.
//
// What is replicated is a session's silence (checkpoints,
// CheckpointSessionsCmd). Before it serves, a new leader records every
// session that has no record unheard from that entry on (a silence of 0
// that grows; see openTerm): no keepalive a previous leader acknowledged
// can be later than that entry, since that leader had lost its quorum
// before this one was elected. While it serves, a session not heard for
// listAfter(ttl) (or, since this leader took over, for
// listAfterPromotion(ttl)) is recorded silent, and recorded again each
// time its silence has grown by checkpointStep(ttl). A new leader starts a
// recorded session from its silence plus the time since it applied the
// record (on its own clock: the record was made before), without a
// margin, rather than from a whole TTL; the elections in between count
// too. So a dead client's session ends TTL after the first promotion that
// follows its last keepalive, however often and however briefly leaders
// serve (counted on the nodes that stayed up; a node started again counts
// from its start). The sessions this leader's own promotion recorded
// unheard, and those with no record, get now + TTL + margin at promotion.
// A keepalive of a recorded session is acknowledged only once an entry
// recording it heard (silence 0) is applied, so that no new leader can
// start it from a silence its client no longer has: proposing the
// checkpoints and those entries from the leader loop alone keeps them in
// the log in the order they were decided.
//
// It is active only on a leader that has applied its whole log and reset
// every deadline (see activate); inactive, it refuses keepalives.
type liveness struct {
	kick chan struct{} // capacity 1: the earliest deadline may have moved, or a keepalive waits for its checkpoint

	mu       sync.Mutex
	active   bool
	sessions map[locktable.SessionID]*liveSession
	queue    deadlineQueue                        // lazy: entries whose deadline is stale are skipped
	checks   deadlineQueue                        // when each session's silence is next due for a checkpoint; lazy too
	heard    map[locktable.SessionID]*liveSession // recorded silent, heard since: due for a checkpoint of silence 0
}

type liveSession struct {
	ttl      time.Duration
	deadline time.Time
	// heard is when the last keepalive arrived, or when this leader
	// started counting; inherited is the silence counted before it (by
	// earlier leaders, as recorded).
	heard     time.Time
	inherited time.Duration
	fresh     bool // not heard since this leader took over
	// logged reports that the log records a silence for the session
	// (recorded, possibly 0: unheard since a promotion), as last proposed
	// or found at promotion. A keepalive is then acknowledged only once a
	// checkpoint of silence 0 is applied after it.
	logged   bool
	recorded time.Duration
	check    time.Time    // when its silence is next due for a checkpoint
	heardBy  []func(bool) // acknowledgements waiting for the checkpoint that records it heard
	expiring bool         // its expiry was proposed: keepalives are no longer taken
}

// silence is how long s has gone without a keepalive at now, counting what
// earlier leaders recorded.
func (s *liveSession) silence(now time.Time) time.Duration { return s.inherited + now.Sub(s.heard) }

// listAfter is how long a session goes unheard before its silence is
// recorded: a third of its TTL, past the keepalive interval of the Go and
// Python clients (TTL/4), so that a healthy session is never recorded.
func listAfter(ttl time.Duration) time.Duration { return ttl / 3 }

// listAfterPromotion is how long a session goes unheard after a new
// leader takes over before its silence is recorded: shorter than
// listAfter, since a live client sends a keepalive as soon as it reaches
// the new leader, and a leader that does not last listAfter would
// otherwise record nothing. Only the sessions slower than that pay for it,
// with two small entries.
func listAfterPromotion(ttl time.Duration) time.Duration { return ttl / 8 }

// checkpointStep is how much a recorded silence grows before it is
// recorded again: what a change of leader can fail to count, beside the
// election itself.
func checkpointStep(ttl time.Duration) time.Duration { return max(ttl/16, time.Millisecond) }

func newLiveness() *liveness {
	return &liveness{kick: make(chan struct{}, 1), sessions: make(map[locktable.SessionID]*liveSession),
		heard: make(map[locktable.SessionID]*liveSession)}
}

// activate starts tracking: a session the log records goes on from its
// silence and the time since this node applied the record, with the
// deadline now + what is left of its TTL (possibly none). The sessions
// recorded unheard at or after since (by this leader's own promotion) and
// those with no record get now + TTL + margin, so that no session dies for
// keepalives a previous leader received, or that arrived while no leader
// could take them.
func (l *liveness) activate(open []fsm.SessionMeta, now, since time.Time, margin time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = true
	l.sessions = make(map[locktable.SessionID]*liveSession, len(open))
	l.heard = make(map[locktable.SessionID]*liveSession)
	l.queue, l.checks = l.queue[:0], l.checks[:0]
	for _, m := range open {
		s := &liveSession{ttl: m.TTL, heard: now, logged: m.Recorded, recorded: m.Silent, fresh: true}
		l.sessions[m.ID] = s
		if !m.Recorded || m.Silent == 0 && !m.SilentAt.Before(since) {
			l.setLocked(m.ID, s, promotionDeadline(now, m.TTL, margin))
		} else {
			// The record was made before this node applied it: the
			// silence has grown since by at least this node's time.
			s.inherited = m.Silent
			if !m.SilentAt.IsZero() {
				s.inherited += max(now.Sub(m.SilentAt), 0)
			}
			l.setLocked(m.ID, s, now.Add(max(m.TTL-s.inherited, 0)))
		}
		l.scheduleLocked(m.ID, s)
	}
	l.poke()
}

// deactivate stops tracking (on loss of leadership). Acknowledgements
// waiting for a checkpoint are dropped: their clients count down to their
// loss, or find the next leader.
func (l *liveness) deactivate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sessions {
		for _, ack := range s.heardBy {
			ack(false)
		}
	}
	l.active = false
	l.sessions = make(map[locktable.SessionID]*liveSession)
	l.heard = make(map[locktable.SessionID]*liveSession)
	l.queue, l.checks = nil, nil
}

// isActive reports whether the node tracks sessions (is a serving leader).
func (l *liveness) isActive() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active
}

// touch records a keepalive of session sid received at now: it lives until
// now + TTL. It reports false when inactive or when the session is unknown
// (expired, expiring, or not yet applied). A session whose silence is
// recorded is not acknowledged at once: ack is called with its TTL once
// the checkpoint that records it heard is applied (true), or cannot be
// (false), from the leader loop (it must be quick and must not call the
// liveness), and touch reports deferred; otherwise the caller acknowledges
// it as usual.
func (l *liveness) touch(sid locktable.SessionID, now time.Time, ack func(ttl time.Duration, ok bool)) (ttl time.Duration, deferred, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[sid]
	if !l.active || s == nil || s.expiring {
		return 0, false, false
	}
	s.heard, s.inherited, s.fresh = now, 0, false
	l.setLocked(sid, s, now.Add(s.ttl))
	l.scheduleLocked(sid, s)
	if !s.logged {
		return s.ttl, false, true
	}
	ttl = s.ttl
	s.heardBy = append(s.heardBy, func(ok bool) { ack(ttl, ok) })
	l.heard[sid] = s
	l.poke()
	return ttl, true, true
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
			l.dropLocked(locktable.SessionID(id))
		}
	}
	if isOpen && r.Err == nil && !r.Duplicate {
		now := time.Now()
		s := &liveSession{ttl: time.Duration(open.OpenSession.GetTtlNanos()), heard: now}
		l.sessions[r.Session] = s
		l.setLocked(r.Session, s, now.Add(s.ttl))
		l.scheduleLocked(r.Session, s)
		l.poke()
	}
	for i := range r.Events {
		switch e := &r.Events[i]; e.Kind {
		case locktable.EventSessionClosed, locktable.EventSessionExpired:
			l.dropLocked(e.Session)
		}
	}
}

// dropLocked forgets an ended session; acknowledgements waiting for it are
// refused.
func (l *liveness) dropLocked(sid locktable.SessionID) {
	if s := l.sessions[sid]; s != nil {
		for _, ack := range s.heardBy {
			ack(false)
		}
		delete(l.sessions, sid)
		delete(l.heard, sid)
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
		for _, ack := range s.heardBy {
			ack(false)
		}
		s.heardBy = nil
		delete(l.heard, top.sid)
		s.deadline = now.Add(time.Second)
		heap.Push(&l.queue, deadlineEntry{sid: top.sid, at: s.deadline})
	}
	return ids, time.Time{}
}

// checkpoint returns what is due for the log at now: the sessions heard
// since their silence was recorded (silence 0), with the acknowledgements
// that wait for that entry, and the sessions whose silence is due to be
// recorded (first at listAfter(ttl), then every checkpointStep(ttl)); and
// when the next one is due (zero if none). It records what it returns as
// proposed: the caller proposes it next, from the leader loop, and calls
// the acknowledgements with the outcome.
func (l *liveness) checkpoint(now time.Time) (cmd *dlmpb.CheckpointSessionsCmd, acks []func(bool), next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmd = &dlmpb.CheckpointSessionsCmd{}
	for sid, s := range l.heard {
		cmd.Sessions = append(cmd.Sessions, &dlmpb.SessionSilence{Session: uint64(sid)})
		acks = append(acks, s.heardBy...)
		s.heardBy, s.logged, s.recorded = nil, false, 0
		l.scheduleLocked(sid, s)
	}
	clear(l.heard)
	for len(l.checks) > 0 {
		top := l.checks[0]
		s := l.sessions[top.sid]
		if s == nil || !s.check.Equal(top.at) || s.expiring {
			heap.Pop(&l.checks) // stale entry
			continue
		}
		if top.at.After(now) {
			next = top.at
			break
		}
		heap.Pop(&l.checks)
		silent := s.silence(now)
		cmd.Sessions = append(cmd.Sessions, &dlmpb.SessionSilence{Session: uint64(top.sid), SilentNanos: int64(silent)})
		s.logged, s.recorded = true, silent
		l.scheduleLocked(top.sid, s)
	}
	if len(cmd.Sessions) == 0 {
		return nil, nil, next
	}
	return cmd, acks, next
}

// setLocked sets a session's deadline and queues it.
func (l *liveness) setLocked(sid locktable.SessionID, s *liveSession, at time.Time) {
	s.deadline = at
	heap.Push(&l.queue, deadlineEntry{sid: sid, at: at})
}

// scheduleLocked queues when s's silence is next due for a checkpoint.
func (l *liveness) scheduleLocked(sid locktable.SessionID, s *liveSession) {
	due := listAfter(s.ttl)
	switch {
	case s.recorded > 0:
		due = s.recorded + checkpointStep(s.ttl)
	case s.fresh:
		due = listAfterPromotion(s.ttl)
	}
	s.check = s.heard.Add(due - s.inherited)
	heap.Push(&l.checks, deadlineEntry{sid: sid, at: s.check})
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

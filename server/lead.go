package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// lead is the goroutine that does the leader's timed work while this node
// leads: expiring sessions and advancing the table clock for wait timeouts.
func (s *Server) lead() {
	defer s.wg.Done()
	for {
		leader, changed := s.node.Leadership()
		if leader {
			s.serveAsLeader(changed)
		}
		select {
		case <-changed:
		case <-s.stop:
			return
		}
	}
}

// serveAsLeader runs one term of leadership: it applies the whole log
// (Barrier), raises the token sequence and records the sessions unheard
// (openTerm), gives every session its deadline, then expires sessions and
// times out waits until leadership changes.
func (s *Server) serveAsLeader(changed <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-changed:
		case <-s.stop:
		}
		cancel()
	}()

	if !s.barrier(ctx) {
		return
	}
	// Before any grant of this term: lift the token sequence above what
	// the state's history can have issued (a restored copy's included),
	// and start the count of every session's silence in the log.
	since, ok := s.openTerm(ctx)
	if !ok {
		return
	}
	// Read the sessions and start tracking them atomically with respect to
	// applies: a session opened or ended in between is not missed.
	s.node.FSM().Read(func(v fsm.View) { s.live.activate(v.Sessions(), time.Now(), since, s.cfg.SessionMargin) })
	s.metrics.leaderChanges.Inc()
	setHealth(s.health, true)
	defer func() {
		setHealth(s.health, false)
		s.live.deactivate()
		s.hub.endAll(errNotLeader)
		s.watches.endAll(errNotLeader, false)
	}()
	s.log.Info("dlm server: serving as leader", "sessions", len(s.node.FSM().Sessions()), "margin", s.cfg.SessionMargin)
	s.announce(ctx)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		ids, next := s.live.expired(now)
		if len(ids) > 0 {
			s.expire(ctx, ids)
		}
		cmd, acks, due := s.live.checkpoint(now)
		if cmd != nil {
			s.checkpoint(ctx, cmd, acks)
		}
		wait := time.Minute
		for _, t := range []time.Time{next, due} {
			if !t.IsZero() {
				wait = min(wait, t.Sub(now))
			}
		}
		if d, ok := s.tableDeadline(); ok {
			if left := time.Duration(d - now.UnixNano()); left <= 0 {
				s.advance(ctx)
				wait = min(wait, time.Millisecond) // look again once it applied
			} else {
				wait = min(wait, left)
			}
		}
		timer.Reset(max(wait, 0))
		select {
		case <-timer.C:
		case <-s.live.kick:
		case <-ctx.Done():
			return
		}
	}
}

// Bounds of the wait between two attempts of the leader's barrier.
const (
	barrierBackoffMin = 10 * time.Millisecond
	barrierBackoffMax = 2 * time.Second
)

// barrier applies the whole log before the node serves as leader, trying
// again after a failure (a log that cannot be written, a leadership that
// is being lost) with a growing pause, up to barrierBackoffMax, while ctx
// lasts; the failures are logged at most once per barrierLogInterval. It
// reports whether the barrier succeeded.
func (s *Server) barrier(ctx context.Context) bool {
	pause := barrierBackoffMin
	for attempt := 1; ; attempt++ {
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.node.Barrier(bctx)
		bcancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.rate.Log(ctx, s.log, slog.LevelWarn, "barrier", "dlm server: barrier failed, retrying", "err", err, "attempt", attempt)
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		pause = min(2*pause, barrierBackoffMax)
	}
}

// announce records this node's client addresses in the replicated state,
// unless they are there already, so that followers can redirect clients
// here. It is best effort: a failure only loses the redirect hint.
func (s *Server) announce(ctx context.Context) {
	client, http := s.cfg.AdvertiseAddr, s.cfg.AdvertiseHTTPAddr
	if client == "" {
		client = s.Addr()
	}
	if http == "" {
		http = s.HTTPAddr()
	}
	if c, h, ok := s.node.FSM().MemberAddrs(s.node.ID()); ok && c == client && h == http {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_SetMember{SetMember: &dlmpb.SetMemberCmd{
		Id: s.node.ID(), ClientAddr: client, HttpAddr: http,
	}}})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("dlm server: could not record this node's addresses", "err", err)
	}
}

// tableDeadline returns the lock table's next wait deadline (table time).
func (s *Server) tableDeadline() (int64, bool) {
	var d int64
	var ok bool
	s.node.FSM().Read(func(v fsm.View) { d, ok = v.Table().NextDeadline() })
	return d, ok
}

// expire proposes the expiry of sessions whose deadline passed.
func (s *Server) expire(ctx context.Context, ids []locktable.SessionID) {
	raw := make([]uint64, len(ids))
	for i, id := range ids {
		raw[i] = uint64(id)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_ExpireSessions{ExpireSessions: &dlmpb.ExpireSessionsCmd{Sessions: raw}}})
	if err != nil {
		s.log.Warn("dlm server: session expiry not applied, will retry", "sessions", raw, "err", err)
		return
	}
	s.metrics.expired.Add(float64(len(ids)))
	s.log.Info("dlm server: sessions expired", "sessions", raw)
}

// checkpoint proposes the record of sessions' silences (see liveness),
// then tells the acknowledgements waiting for it whether it applied.
func (s *Server) checkpoint(ctx context.Context, cmd *dlmpb.CheckpointSessionsCmd, acks []func(bool)) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_CheckpointSessions{CheckpointSessions: cmd}})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("dlm server: sessions' silences not recorded", "sessions", len(cmd.GetSessions()), "err", err)
	}
	for _, ack := range acks {
		ack(err == nil)
	}
}

// advance proposes an Advance entry, which times out the waits whose
// deadline passed.
func (s *Server) advance(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}}); err != nil {
		s.log.Warn("dlm server: advance not applied", "err", err)
	}
}

// keepalives lists the streams that have a keepalive awaiting its
// acknowledgement, for confirmKeepalives. Each stream keeps only its newest
// such keepalive (in outbox.ka) and is listed once, so the list is bounded
// by the number of streams and adding to it never blocks a reader.
type keepalives struct {
	mu    sync.Mutex
	boxes []*outbox
	wake  chan struct{} // capacity 1: a stream was listed
}

func newKeepalives() *keepalives { return &keepalives{wake: make(chan struct{}, 1)} }

// add makes a the keepalive of ob to acknowledge, replacing an older one
// not yet taken (an acknowledgement of the newest is enough).
func (k *keepalives) add(ob *outbox, a *keepaliveAck) {
	if ob.ka.Swap(a) != nil {
		return // listed already
	}
	k.mu.Lock()
	k.boxes = append(k.boxes, ob)
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// take returns the listed streams and empties the list, which then reuses
// buf.
func (k *keepalives) take(buf []*outbox) []*outbox {
	if cap(buf) > keepBuffer {
		buf = nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	boxes := k.boxes
	k.boxes = buf[:0]
	return boxes
}

// ackFor is a keepalive taken for acknowledgement and its stream.
type ackFor struct {
	ob *outbox
	a  *keepaliveAck
}

// confirmKeepalives acknowledges keepalives in batches, each once the
// node's leadership is confirmed after the keepalive arrived: a client never
// holds an acknowledgement from a deposed leader. It takes each listed
// stream's keepalive before it asks for the confirmation, so what it
// acknowledges arrived before.
func (s *Server) confirmKeepalives() {
	defer s.wg.Done()
	defer close(s.confirmed)
	var (
		boxes []*outbox
		batch []ackFor
	)
	for {
		select {
		case <-s.kas.wake:
		case <-s.stop:
			return
		}
		select {
		case <-s.stop: // both were ready: stop wins
			return
		default:
		}
		boxes = s.kas.take(boxes)
		batch = batch[:0]
		for _, ob := range boxes {
			if a := ob.ka.Swap(nil); a != nil {
				batch = append(batch, ackFor{ob: ob, a: a})
			}
		}
		clear(boxes)
		if err := s.node.VerifyLeader(); err == nil { // else unacknowledged: the clients count down to their loss
			for _, b := range batch {
				b.ob.push(keepaliveAckOf(b.a.ka, b.a.ttl))
			}
		}
		clear(batch)
		if cap(batch) > keepBuffer {
			batch = nil
		}
	}
}

// keepaliveAckOf is the acknowledgement of keepalive ka, for a session of
// ttl.
func keepaliveAckOf(ka *dlmpb.KeepAlive, ttl time.Duration) *dlmpb.SessionResponse {
	return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_KeepAliveAck{KeepAliveAck: &dlmpb.KeepAliveAck{
		Seq: ka.GetSeq(), SentUnixNano: ka.GetSentUnixNano(), Ttl: pbDuration(ttl),
	}}}
}

// applied is the FSM observer: it feeds the streams, the liveness record
// and the metrics.
func (s *Server) applied(c *dlmpb.Command, r *fsm.Result) {
	s.hub.route(c, r)
	s.watches.changed(r)
	s.live.track(c, r)
	s.metrics.count(r)
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Lock:
		if op.Lock.WaitNanos != nil && r.Status == locktable.StatusQueued {
			s.live.poke()
		}
	case *dlmpb.Command_Convert:
		if op.Convert.WaitNanos != nil && r.Status == locktable.StatusQueued {
			s.live.poke()
		}
	}
}

package server

import (
	"context"
	"time"

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
// (Barrier), gives every session a fresh deadline, then expires sessions and
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

	for {
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.node.Barrier(bctx)
		bcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("dlm server: barrier failed, retrying", "err", err)
	}
	// Read the sessions and start tracking them atomically with respect to
	// applies: a session opened or ended in between is not missed.
	fsm := s.node.FSM()
	fsm.View(func(*locktable.Table) { s.live.activate(fsm.sessionsLocked(), time.Now(), s.cfg.SessionMargin) })
	s.metrics.leaderChanges.Inc()
	defer func() {
		s.live.deactivate()
		s.hub.endAll(errNotLeader)
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
		wait := time.Minute
		if !next.IsZero() {
			wait = min(wait, next.Sub(now))
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
	if c, h, ok := s.node.FSM().MemberAddrs(s.node.cfg.ID); ok && c == client && h == http {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_SetMember{SetMember: &dlmpb.SetMemberCmd{
		Id: s.node.cfg.ID, ClientAddr: client, HttpAddr: http,
	}}})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("dlm server: could not record this node's addresses", "err", err)
	}
}

// tableDeadline returns the lock table's next wait deadline (table time).
func (s *Server) tableDeadline() (int64, bool) {
	var d int64
	var ok bool
	s.node.FSM().View(func(t *locktable.Table) { d, ok = t.NextDeadline() })
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

// advance proposes an Advance entry, which times out the waits whose
// deadline passed.
func (s *Server) advance(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}}); err != nil {
		s.log.Warn("dlm server: advance not applied", "err", err)
	}
}

// confirmKeepalives acknowledges keepalives in batches, each once the
// node's leadership is confirmed after the keepalive arrived: a client never
// holds an acknowledgement from a deposed leader.
func (s *Server) confirmKeepalives() {
	defer s.wg.Done()
	var batch []keepaliveAck
	for {
		batch = batch[:0]
		select {
		case a := <-s.acks:
			batch = append(batch, a)
		case <-s.stop:
			return
		}
	more:
		for len(batch) < cap(s.acks) {
			select {
			case a := <-s.acks:
				batch = append(batch, a)
			default:
				break more
			}
		}
		if err := s.node.VerifyLeader(); err != nil {
			continue // unacknowledged: the clients count down to their loss
		}
		for _, a := range batch {
			a.ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_KeepAliveAck{KeepAliveAck: &dlmpb.KeepAliveAck{
				Seq: a.ka.GetSeq(), SentUnixNano: a.ka.GetSentUnixNano(), Ttl: pbDuration(a.ttl),
			}}})
		}
		clear(batch)
	}
}

// observe is the FSM observer: it feeds the streams, the liveness record
// and the metrics.
func (s *Server) observe(c *dlmpb.Command, r *Result) {
	s.hub.observe(c, r)
	s.live.observe(c, r)
	s.metrics.observe(r)
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

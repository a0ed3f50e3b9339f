package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// session is one etcd lease that the store keeps alive in the background:
// the keys of every request whose TTL rounds up to the same whole seconds
// are put under it, as concurrency.Session does for concurrency.Mutex.
type session struct {
	id      clientv3.LeaseID
	seconds int64              // the lease seconds asked for: its key in Store.sessions
	ttl     time.Duration      // the lease's TTL as etcd granted it
	lost    context.Context    // done when the session ends (lost, idle, closed)
	lose    context.CancelFunc // ends lost
	stop    context.CancelFunc

	// Guarded by Store.mu.
	validUntil time.Time // the lease certainly lives until then
	refs       int       // requests and grants whose key is under the lease
	used       bool      // a request took the session since the last keep-alive
	ended      bool
	err        error                // why the session ended
	orphans    map[*ticket]struct{} // keys whose deletion failed, retried at each keep-alive
	slots      map[string]*slotSet  // by resource: the keys its requests use
}

// errClosed is the error of a store that was closed.
var errClosed = fmt.Errorf("%w: etcd store closed", driver.ErrUnavailable)

// drift is the allowance for the difference in clock rate between the
// client and etcd over a lease of ttl: 1% plus 2 ms, package dlm's default.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// session returns the session for requests with the TTL ttl, opening one
// (one lease grant) when there is none yet or the last one ended. The
// caller holds a reference on it, given back by forget.
func (s *Store) session(ctx context.Context, ttl time.Duration) (*session, error) {
	n := leaseSeconds(ttl)
	if ss, err := s.takeSession(n); ss != nil || err != nil {
		return ss, err
	}
	s.opening.Lock() // one grant at a time: concurrent first requests share it
	defer s.opening.Unlock()
	if ss, err := s.takeSession(n); ss != nil || err != nil {
		return ss, err
	}
	sent := time.Now()
	resp, err := s.grantLease(ctx, n)
	if err != nil {
		return nil, err
	}
	ttl = time.Duration(resp.TTL) * time.Second
	kctx, stop := context.WithCancel(s.ctx)
	lost, lose := context.WithCancel(context.Background())
	ss := &session{
		id: resp.ID, seconds: n, ttl: ttl, lost: lost, lose: lose, stop: stop,
		validUntil: sent.Add(ttl - drift(ttl)), refs: 1, used: true,
		orphans: make(map[*ticket]struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		stop()
		s.revoke(ctx, resp.ID)
		return nil, errClosed
	}
	s.sessions[n] = ss
	s.wg.Add(1)
	s.mu.Unlock()
	go s.keep(kctx, ss)
	return ss, nil
}

// takeSession returns the live session of n lease seconds with a reference
// taken, or nil when there is none.
func (s *Store) takeSession(n int64) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	ss := s.sessions[n]
	if ss == nil || ss.ended || !time.Now().Before(ss.validUntil) {
		return nil, nil
	}
	ss.refs++
	ss.used = true
	return ss, nil
}

// keep keeps the session's lease alive: one KeepAliveOnce every third of
// its TTL, retried every retryEvery while it fails. The session ends, and
// every grant under it is lost, when etcd no longer has the lease, when no
// keep-alive was acknowledged by the session's validity (the sending time of
// the last acknowledged one, plus the TTL, less the drift allowance), or
// when ctx ends (Close, or the etcd client closed). A session that no
// request used between two keep-alives is revoked.
func (s *Store) keep(ctx context.Context, ss *session) {
	defer s.wg.Done()
	defer ss.stop()
	next := time.Now().Add(ss.ttl / 3)
	timer := time.NewTimer(ss.ttl / 3)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			s.end(ss, errClosed)
			return
		case <-timer.C:
		}
		s.mu.Lock()
		until := ss.validUntil
		s.mu.Unlock()
		now := time.Now()
		if !now.Before(until) {
			s.end(ss, fmt.Errorf("%w: etcd session lease %x: no keep-alive acknowledged within its TTL of %s",
				driver.ErrUnavailable, int64(ss.id), ss.ttl))
			return
		}
		if !now.Before(next) {
			if s.idle(ss) {
				s.revoke(ctx, ss.id)
				return
			}
			switch err := s.renew(ctx, ss, until); {
			case err == nil:
				next = now.Add(ss.ttl / 3)
				s.sweep(ctx, ss)
			case errors.Is(err, errLeaseGone):
				s.end(ss, fmt.Errorf("%w: etcd session lease %x: %w", driver.ErrUnavailable, int64(ss.id), err))
				return
			default:
				next = time.Now().Add(min(ss.ttl/3, retryEvery))
			}
		}
		s.mu.Lock()
		until = ss.validUntil
		s.mu.Unlock()
		timer.Reset(max(0, min(time.Until(next), time.Until(until))))
	}
}

// retryEvery is how soon a keep-alive that failed is sent again.
const retryEvery = 250 * time.Millisecond

// renew sends one keep-alive for the session, bounded by the request timeout
// and by until, the session's validity, and moves the validity on when etcd
// acknowledges it.
func (s *Store) renew(ctx context.Context, ss *session, until time.Time) error {
	sent := time.Now()
	bound := sent.Add(s.timeout)
	if until.Before(bound) {
		bound = until
	}
	cctx, cancel := context.WithDeadline(ctx, bound)
	defer cancel()
	resp, err := s.cli.KeepAliveOnce(cctx, ss.id)
	if err != nil {
		if isLeaseGone(err) {
			return errLeaseGone
		}
		return err
	}
	ttl := time.Duration(resp.TTL) * time.Second
	if ttl <= 0 {
		return errLeaseGone
	}
	s.mu.Lock()
	if v := sent.Add(ttl - drift(ttl)); v.After(ss.validUntil) {
		ss.validUntil = v
	}
	s.mu.Unlock()
	return nil
}

// idle ends the session if no request used it since the last keep-alive
// and no key is under its lease; it reports whether it did. The caller
// revokes the lease.
func (s *Store) idle(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.refs > 0 || ss.used || ss.ended {
		ss.used = false
		return false
	}
	s.endLocked(ss, errors.New("etcd session closed when idle"))
	return true
}

// end ends the session with cause: every grant under it is lost (its Lost
// channel closes) and its waiters give up; the next request opens a new
// session. The lease is left to expire.
func (s *Store) end(ss *session, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(ss, cause)
}

func (s *Store) endLocked(ss *session, cause error) {
	if ss.ended {
		return
	}
	ss.ended, ss.err = true, cause
	if s.sessions[ss.seconds] == ss {
		delete(s.sessions, ss.seconds)
	}
	ss.orphans, ss.slots = nil, nil
	ss.lose() // every grant under the session is lost
	ss.stop()
}

// forget gives back the reference of a ticket whose key is gone.
func (s *Store) forget(t *ticket) {
	if t.ss == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(t)
}

func (s *Store) forgetLocked(t *ticket) {
	if t.gone {
		return
	}
	t.gone = true
	t.ss.refs--
	if !t.ss.ended {
		delete(t.ss.orphans, t)
	}
}

// unref gives back a reference taken by session whose request made no
// ticket.
func (s *Store) unref(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss.refs--
}

// remove deletes the ticket's key and gives back its reference. A key whose
// deletion fails is an orphan, whose deletion the session's keep-alive loop
// retries, so that a live session keeps no key that nobody owns. It reports
// whether the key it deleted was the ticket's (the same create revision).
//
// It is a plain delete that returns the deleted key, not a transaction
// guarded by the create revision: the key's slot belongs to the request
// until this call answers (see slotSet), so only a delayed earlier attempt
// of the same request could have created the key again, and that key is
// better gone too. etcd serves the plain delete at less cost: under 64
// lockers on distinct keys the store's throughput went from 0.63-0.64x to
// 0.82-0.84x that of etcd's Mutex, which releases with a plain delete as
// well (docs/stores.md). The slot is free again once the delete answered.
// Releases that come together go in one transaction (deleteKey).
func (s *Store) remove(ctx context.Context, t *ticket) (bool, error) {
	prev, err := s.deleteKey(ctx, t.key)
	if err != nil {
		s.orphan(t)
		return false, s.fail(ctx, "delete key", err)
	}
	s.forget(t)
	if t.ss != nil {
		s.leaveSlot(t.ss, t.resource, t.owner, true)
	} else {
		s.retireSlots(t.resource, t.owner)
	}
	return prev != nil && prev.CreateRevision == t.rev, nil
}

// orphan records a ticket whose key could not be deleted.
func (s *Store) orphan(t *ticket) {
	if t.ss == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !t.gone && !t.ss.ended {
		t.ss.orphans[t] = struct{}{}
	}
}

// sweep deletes the session's orphans, each guarded by its create revision,
// and stops at the first failure.
func (s *Store) sweep(ctx context.Context, ss *session) {
	s.mu.Lock()
	orphans := make([]*ticket, 0, len(ss.orphans))
	for t := range ss.orphans {
		orphans = append(orphans, t)
	}
	s.mu.Unlock()
	for _, t := range orphans {
		cctx, cancel := s.call(ctx)
		_, err := s.cli.Txn(cctx).
			If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
			Then(clientv3.OpDelete(t.key)).
			Commit()
		cancel()
		if err != nil {
			return
		}
		s.mu.Lock()
		t.swept = true
		s.forgetLocked(t)
		leaveSlotLocked(ss, t.resource, t.owner, false)
		s.mu.Unlock()
	}
}

// abandon ends the session of requests with the TTL ttl: what package dlm
// releases with an empty grant is a request whose outcome is unknown, and
// when that release fails too, its key may be under the session, owned by
// nobody. The session's lease then expires, with every key under it, and
// its grants are lost.
func (s *Store) abandon(ttl time.Duration, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[leaseSeconds(ttl)]; ss != nil {
		s.endLocked(ss, cause)
	}
}

// ValidUntil returns until when the session whose lease carries g is known
// to live: the sending time of its last acknowledged keep-alive plus the
// lease's TTL, less the drift allowance. Extend does not renew anything (the
// session's keep-alives do), so a lease's own deadline can run past it; the
// store closes the grant's Lost channel when it passes. It is the zero time
// for a grant the store does not know (released, or without a handle) or
// whose session ended. See driver.Validator.
func (s *Store) ValidUntil(_ driver.Request, g driver.Grant) time.Time {
	t, ok := g.Handle.(*ticket)
	if !ok || t == nil || t.ss == nil {
		return time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.gone || t.ss.ended {
		return time.Time{}
	}
	return t.ss.validUntil
}

var _ driver.Validator = (*Store)(nil)

// Close ends the store's sessions: every lock still held is lost (its Lost
// channel closes), the sessions' leases are revoked, which deletes every key
// under them at once, and the keep-alive goroutines stop. Requests made
// after Close fail with driver.ErrUnavailable. A lease that cannot be
// revoked before ctx ends (or the request timeout) expires by itself. Close
// does not close the etcd client; closing the client ends the sessions
// likewise, without revoking them.
func (s *Store) Close(ctx context.Context) error {
	if s.bad != nil {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var ids []clientv3.LeaseID
	for _, ss := range s.sessions {
		ids = append(ids, ss.id)
		s.endLocked(ss, errClosed)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		cctx, cancel := s.call(ctx)
		if _, err := s.cli.Revoke(cctx, id); err != nil && !isLeaseGone(err) {
			errs = append(errs, s.fail(ctx, "revoke session lease", err))
		}
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	s.settling.Wait()
	return errors.Join(errs...)
}

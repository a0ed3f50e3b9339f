package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
)

// Extend checks that the session holding the lock is alive and holds it,
// and moves the store's own expiry of the lock to req.TTL from now.
func (s *Store) Extend(ctx context.Context, req driver.Request, g driver.Grant) error {
	l, err := s.handle(req, g)
	if err != nil {
		return err
	}
	return l.verify(ctx, req.TTL)
}

// Release unlocks on the holding session, and gives a connection of the
// lock's own back to the pool. Releasing a released lock again is not an
// error.
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	l, err := s.handle(req, g)
	if err != nil {
		return err
	}
	return l.release(ctx)
}

// lock is the handle of one granted lock: the session that holds it, a
// shared one or a pooled connection of the lock's own. Its methods take
// turns.
//
// PostgreSQL keeps the lock while the session lives, so the store enforces
// the TTL itself: a lock not extended within its TTL is unlocked. Package
// dlm never releases a lease that expired on its side, and without this the
// session would hold the lock, and the pool's connection, until the process
// exits.
type lock struct {
	store    *Store
	owner    string
	resource string
	key      int64
	sql      *modeSQL
	pid      int32     // the backend that granted the lock
	token    uint64    // the grant's
	since    time.Time // the server's clock at the grant

	// order lines up the lock's calls (see turn): last is closed once
	// the latest call is done.
	order sync.Mutex
	last  chan struct{}

	mu       sync.Mutex
	h        keeper    // nil once released or lost
	lost     error     // why the lock is gone, when it was lost
	expires  time.Time // when the store unlocks it unless extended
	recorded bool      // the session wrote the holder's row: unlock deletes it
	// expiry runs expire at expires, on the store's clock: a grant arms
	// no runtime timer of its own (see package alarm). Set by hold, before
	// the grant is handed out.
	expiry *alarm.Alarm
}

// keeper is the session that holds a granted lock (shared.go).
type keeper interface {
	// query runs sql with args and scans its one row into dest.
	query(ctx context.Context, sql string, args []any, dest ...any) error
	// unlock runs the unlock statement sql, as query does.
	unlock(ctx context.Context, sql string, args []any, dest ...any) error
	// ended reports whether the session ended, and the lock with it.
	ended() bool
	// released follows a successful unlock.
	released()
	// dropped follows an unlock that the caller's context interrupted.
	dropped()
	// end makes sure that nothing of the lock remains.
	end()
}

// hold starts the lock's expiry, ttl from now.
func (l *lock) hold(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expires = time.Now().Add(ttl)
	l.expiry = l.store.clock.At(l.expires, l.expire)
}

// expire runs when the lock's expiry is due: it unlocks a
// lock whose TTL passed without an extension.
func (l *lock) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return
	}
	if time.Until(l.expires) > 0 { // extended meanwhile
		l.expiry.Reset(l.expires)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	why := fmt.Errorf("%w: %q expired: not extended within its TTL", driver.ErrNotHeld, l.resource)
	if l.unlock(ctx) != nil && l.h != nil {
		l.lose(why) // the unlock failed: close the session instead
		return
	}
	l.lost = why
}

// goneLocked returns why the lock is no longer held, if it is not: its
// loss, or its release.
func (l *lock) goneLocked() error {
	if l.h != nil {
		return nil
	}
	if l.lost != nil {
		return l.lost
	}
	return fmt.Errorf("%w: %q was released", driver.ErrNotHeld, l.resource)
}

// verify checks that the holding session is alive, is still the backend
// that granted the lock, and holds it; then it moves the expiry to ttl from
// the check.
func (l *lock) verify(ctx context.Context, ttl time.Duration) error {
	return l.turn(ctx, "extend", func(ctx context.Context) error { return l.verifyLocked(ctx, ttl) })
}

func (l *lock) verifyLocked(ctx context.Context, ttl time.Duration) error {
	if err := l.goneLocked(); err != nil {
		return err
	}
	start := time.Now()
	classid, objid := lockID(l.key)
	var pid int32
	var held bool
	err := l.h.query(ctx, heldSQL, []any{classid, objid, l.sql.lockMode}, &pid, &held)
	if err := l.stillHeld(ctx, "extend", err, pid, held); err != nil {
		return err
	}
	l.expires = start.Add(ttl)
	l.expiry.Reset(l.expires)
	return nil
}

// stillHeld judges the answer of a statement op run on the holding
// connection that reports the backend's pid and whether it holds the lock:
// an error the server answered leaves the lock held; a closed connection,
// another backend or a lock no longer held lose it.
func (l *lock) stillHeld(ctx context.Context, op string, err error, pid int32, held bool) error {
	switch {
	case err != nil && !l.h.ended():
		// The server answered with an error; the session, and its
		// lock, live on.
		return fail(ctx, op, err)
	case err != nil && ctx.Err() != nil:
		return l.lose(fmt.Errorf("%w: %q: the holding session ended when the context ended, and the lock with it: %w",
			driver.ErrNotHeld, l.resource, ctx.Err()))
	case err != nil:
		return l.lose(fmt.Errorf("%w: %q: the session holding the lock ended: %w", driver.ErrNotHeld, l.resource, err))
	case pid != l.pid:
		return l.lose(l.moved(pid))
	case !held:
		return l.lose(fmt.Errorf("%w: %q: the session no longer holds the lock", driver.ErrNotHeld, l.resource))
	}
	return nil
}

// release unlocks on the holding session.
func (l *lock) release(ctx context.Context) error {
	return l.turn(ctx, "release", func(ctx context.Context) error {
		if l.h == nil {
			return l.lost // nil after a release
		}
		return l.unlock(ctx)
	})
}

// turn runs fn, a call on the lock, once the calls made before it are
// done, under l.mu and on a context of its own (detach), and waits for it
// or for ctx's end. A call whose caller gives up runs to its answer all the
// same, and the lock's next call waits for it: so a statement cut short
// never breaks the holding connection (which would end the lock), and a
// Release made again after one given up reports the first one's outcome,
// which is known once it returns.
func (l *lock) turn(ctx context.Context, op string, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres %s: %w", op, err) // not sent
	}
	next := make(chan struct{})
	l.order.Lock()
	prev := l.last
	l.last = next
	l.order.Unlock()
	octx, stop := detach(ctx)
	done := make(chan error, 1)
	go func() {
		defer close(next)
		defer stop()
		if prev != nil {
			<-prev
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		done <- fn(octx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	default:
		return fmt.Errorf("postgres %s: %w (the statement runs on; the lock's next call waits for it)", op, ctx.Err())
	}
}

// detach returns a context for a statement that runs to its answer after
// its caller gives up: it carries ctx's values and ends cleanupTimeout
// after ctx ends, or when stop is called.
func detach(ctx context.Context) (_ context.Context, stop func()) {
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stopAfter := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(cleanupTimeout, cancel)
	})
	return octx, func() {
		stopAfter()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// unlock runs the unlock statement, which also deletes the holder's row if
// the session wrote one, and lets the holder go.
func (l *lock) unlock(ctx context.Context) error {
	stmt := l.sql.unlock
	if l.recorded {
		stmt = l.sql.unlockRecord
	}
	var pid int32
	var unlocked *bool
	err := l.h.unlock(ctx, stmt, []any{l.key, l.pid}, &pid, &unlocked)
	switch {
	case err == nil && unlocked == nil:
		return l.lose(l.moved(pid))
	case err == nil && !*unlocked:
		return l.lose(fmt.Errorf("%w: %q: the session did not hold the lock", driver.ErrNotHeld, l.resource))
	case err == nil:
		l.expiry.Stop()
		l.h.released()
		l.h = nil
		return nil
	case ctx.Err() != nil:
		// A connection of the lock's own is closed, which frees the
		// lock as soon as the server sees it; on a shared session the
		// unlock runs all the same. There is nothing left to release.
		l.expiry.Stop()
		l.h.dropped()
		l.h = nil
		return fmt.Errorf("postgres release: %w (the lock is freed all the same)", ctx.Err())
	case l.h.ended():
		return l.lose(fmt.Errorf("%w: %q: the session holding the lock had ended: %w", driver.ErrNotHeld, l.resource, err))
	default:
		// The session lives and still holds the lock: Release may be
		// called again.
		return fail(ctx, "release", err)
	}
}

// lose ends the holding session, so that nothing of the lock can remain,
// and records why the lock is gone.
func (l *lock) lose(why error) error {
	l.expiry.Stop()
	l.h.end()
	l.h = nil
	l.lost = why
	return why
}

// moved is the error of a connection that reaches another backend than the
// one that granted the lock.
func (l *lock) moved(pid int32) error {
	return fmt.Errorf("%w: %q: the connection now reaches backend %d, not %d that granted the lock "+
		"(a connection pooler in transaction mode?)", driver.ErrNotHeld, l.resource, pid, l.pid)
}

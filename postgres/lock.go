package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
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

// Release unlocks on the holding connection and gives the connection back
// to the pool. Releasing a released lock again is not an error.
func (s *Store) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	l, err := s.handle(req, g)
	if err != nil {
		return err
	}
	return l.release(ctx)
}

// lock is the handle of one granted lock: the pooled connection whose
// session holds it. Its methods take turns, since a connection runs one
// statement at a time.
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

	mu       sync.Mutex
	conn     *pgxpool.Conn // nil once released or lost
	lost     error         // why the lock is gone, when it was lost
	expires  time.Time     // when the store unlocks it unless extended
	expiry   *time.Timer
	recorded bool // the session wrote the holder's row: unlock deletes it
}

// hold starts the lock's expiry, ttl from now.
func (l *lock) hold(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expires = time.Now().Add(ttl)
	l.expiry = time.AfterFunc(ttl, l.expire)
}

// expire runs when the expiry timer fires: it unlocks a lock whose TTL
// passed without an extension.
func (l *lock) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	if d := time.Until(l.expires); d > 0 { // extended meanwhile
		l.expiry.Reset(d)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	why := fmt.Errorf("%w: %q expired: not extended within its TTL", driver.ErrNotHeld, l.resource)
	if l.unlock(ctx) != nil && l.conn != nil {
		l.lose(why) // the unlock failed: close the session instead
		return
	}
	l.lost = why
}

// goneLocked returns why the lock is no longer held, if it is not: its
// loss, or its release.
func (l *lock) goneLocked() error {
	if l.conn != nil {
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.goneLocked(); err != nil {
		return err
	}
	start := time.Now()
	classid, objid := lockID(l.key)
	var pid int32
	var held bool
	err := l.conn.QueryRow(ctx, heldSQL, classid, objid, l.sql.lockMode).Scan(&pid, &held)
	if err := l.stillHeld(ctx, "extend", err, pid, held); err != nil {
		return err
	}
	l.expires = start.Add(ttl)
	return nil
}

// stillHeld judges the answer of a statement op run on the holding
// connection that reports the backend's pid and whether it holds the lock:
// an error the server answered leaves the lock held; a closed connection,
// another backend or a lock no longer held lose it.
func (l *lock) stillHeld(ctx context.Context, op string, err error, pid int32, held bool) error {
	switch {
	case err != nil && !l.conn.Conn().IsClosed():
		// The server answered with an error; the session, and its
		// lock, live on.
		return fail(ctx, op, err)
	case err != nil && ctx.Err() != nil:
		return l.lose(fmt.Errorf("%w: %q: the holding connection was closed when the context ended, and the lock with its session: %w",
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

// release unlocks on the holding connection and gives it back to the pool.
func (l *lock) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return l.lost // nil after a release
	}
	return l.unlock(ctx)
}

// unlock runs the unlock statement, which also deletes the holder's row if
// the session wrote one, and settles the connection.
func (l *lock) unlock(ctx context.Context) error {
	stmt := l.sql.unlock
	if l.recorded {
		stmt = l.sql.unlockRecord
	}
	var pid int32
	var unlocked *bool
	err := l.conn.QueryRow(ctx, stmt, l.key, l.pid).Scan(&pid, &unlocked)
	switch {
	case err == nil && unlocked == nil:
		return l.lose(l.moved(pid))
	case err == nil && !*unlocked:
		return l.lose(fmt.Errorf("%w: %q: the session did not hold the lock", driver.ErrNotHeld, l.resource))
	case err == nil:
		l.expiry.Stop()
		l.conn.Release()
		l.conn = nil
		return nil
	case ctx.Err() != nil:
		// Closing the session frees the lock as soon as the server
		// sees it; there is nothing left to release.
		l.expiry.Stop()
		discard(l.conn)
		l.conn = nil
		return fmt.Errorf("postgres release: %w (the holding connection was closed, which frees the lock)", ctx.Err())
	case l.conn.Conn().IsClosed():
		return l.lose(fmt.Errorf("%w: %q: the session holding the lock had ended: %w", driver.ErrNotHeld, l.resource, err))
	default:
		// The session lives and still holds the lock: Release may be
		// called again.
		return fail(ctx, "release", err)
	}
}

// lose closes the holding connection, so that nothing of the lock can
// remain, and records why the lock is gone.
func (l *lock) lose(why error) error {
	l.expiry.Stop()
	discard(l.conn)
	l.conn = nil
	l.lost = why
	return why
}

// moved is the error of a connection that reaches another backend than the
// one that granted the lock.
func (l *lock) moved(pid int32) error {
	return fmt.Errorf("%w: %q: the connection now reaches backend %d, not %d that granted the lock "+
		"(a connection pooler in transaction mode?)", driver.ErrNotHeld, l.resource, pid, l.pid)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
)

// AcquireWait queues for the lock in the server with pg_advisory_lock and
// blocks until it is granted or ctx ends. The server grants in queue order
// and answers at once; nothing polls. When ctx ends first, the store cancels
// the waiting statement with a cancel request and returns an error wrapping
// both driver.ErrTaken and ctx.Err(); if the grant won the race, the lock is
// unlocked. A lock_timeout or statement_timeout of the role that ends the
// wait is reported as driver.ErrTaken.
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	key, q, err := s.prepare(req)
	if err != nil {
		return driver.Grant{}, err
	}
	if s.isClosed() {
		return driver.Grant{}, errClosed
	}
	c, err := s.conn(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	r, interrupted, err := s.wait(ctx, c, q, key, req.Metadata)
	if err == nil && r.pooler {
		err := errPooler(r.pid, c.Conn().PgConn().PID())
		c.Release() // nothing was taken
		return driver.Grant{}, err
	}
	switch {
	case interrupted:
		s.settle(c, key, q)
		if err != nil && !isCode(err, "57014") {
			// The wait did not end by the cancel: the server or the
			// connection failed as well.
			return driver.Grant{}, fmt.Errorf("%w: postgres wait: %v: %w", driver.ErrUnavailable, err, ctx.Err())
		}
		return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, ctx.Err())
	case err != nil && (isCode(err, "55P03") || isCode(err, "57014")):
		s.settle(c, key, q)
		return driver.Grant{}, fmt.Errorf("%w: %q: the server ended the wait: %w", driver.ErrTaken, req.Resource, err)
	case err != nil:
		s.settle(c, key, q)
		return driver.Grant{}, fail(ctx, "acquire", err)
	}
	return s.newGrant(req, key, ownHold{c}, r), nil
}

// wait runs the blocking grant statement of q on c (recording metadata, as
// grant does) on a context of its own, so
// that the end of ctx does not close the connection. When ctx ends first it
// sends the server a cancel request for the statement, which then ends with
// SQLSTATE 57014 (or with the grant, if that came first); interrupted is
// true and the caller must settle the connection. When the server cannot be
// told, or does not end the statement soon after, the connection is closed.
func (s *Store) wait(ctx context.Context, c *pgxpool.Conn, q *modeSQL, key int64, metadata string) (r result, interrupted bool, err error) {
	qctx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	pgc := c.Conn().PgConn()
	returned := make(chan struct{})
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		interrupt(pgc, returned, abandon)
	})
	r, err = s.grant(qctx, c, q, true, key, metadata)
	close(returned)
	if stop() {
		return r, false, err
	}
	// The next statement on c must wait until the cancel request has been
	// delivered: a late one would cancel it instead.
	<-cancelled
	return r, true, err
}

// interrupt asks the server to cancel the statement running on conn and
// waits for it to return; it closes the connection, through abandon, when
// that fails.
func interrupt(conn *pgconn.PgConn, returned <-chan struct{}, abandon context.CancelFunc) {
	select {
	case <-returned:
		return // finished on its own: nothing to cancel
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := conn.CancelRequest(ctx); err != nil {
		abandon()
		return
	}
	t := time.NewTimer(cleanupTimeout)
	defer t.Stop()
	select {
	case <-returned:
	case <-t.C:
		abandon()
	}
}

// isCode reports whether err is a PostgreSQL error with the SQLSTATE code.
func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

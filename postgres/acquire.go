package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
)

// Acquire makes one attempt with pg_try_advisory_lock, without waiting or
// queueing. A granted lock is held by one of the store's shared sessions,
// or, when a lock of this store holds the resource already or the shared
// sessions are off, by a connection of its own until Release.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	key, q, err := s.prepare(req)
	if err != nil {
		return driver.Grant{}, err
	}
	if s.shared != nil {
		if err := s.setUp(ctx); err != nil {
			return driver.Grant{}, err
		}
		r, settling := s.shared.reserve(key)
		for r == nil && settling != nil {
			select {
			case <-settling:
			case <-ctx.Done():
				return driver.Grant{}, fmt.Errorf("postgres acquire: %w (an earlier acquisition of the key is being settled)", ctx.Err())
			}
			r, settling = s.shared.reserve(key)
		}
		if r != nil {
			return s.acquireShared(ctx, req, key, q, r)
		}
		if s.isClosed() {
			return driver.Grant{}, errClosed
		}
	}
	c, err := s.conn(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	r, err := s.grant(ctx, c, q, false, key, req.Metadata)
	switch {
	case err != nil:
		s.settle(c, key, q)
		return driver.Grant{}, fail(ctx, "acquire", err)
	case r.pooler:
		err := errPooler(r.pid, c.Conn().PgConn().PID())
		c.Release() // nothing was taken
		return driver.Grant{}, err
	case !r.granted:
		c.Release() // nothing was taken: the connection is clean
		return driver.Grant{}, fmt.Errorf("%w: %q", driver.ErrTaken, req.Resource)
	}
	return s.newGrant(req, key, ownHold{c}, r), nil
}

// acquireShared makes the attempt of Acquire on the shared session of key,
// whose place r holds. Whatever the caller's context does, the session
// settles the statement's outcome: it unlocks a grant that nobody waits
// for, resets the key after an error, and gives the place up unless a lock
// holds it.
func (s *Store) acquireShared(ctx context.Context, req driver.Request, key int64, q *modeSQL, r *reservation) (driver.Grant, error) {
	ss, err := s.shared.session(ctx, key)
	if err != nil {
		s.shared.free(r)
		if err == errClosed {
			return driver.Grant{}, err
		}
		return driver.Grant{}, fail(ctx, "connect", err)
	}
	stmt, args, record := s.grantStatement(q, false, key, req.Metadata, ss.pid)
	c, err := newCall(stmt, args, func(c *call, abandoned bool) {
		s.settleShared(ss, c, abandoned, key, q, r, record)
	})
	if err != nil {
		s.shared.free(r)
		return driver.Grant{}, err
	}
	if err := ss.do(ctx, c); err != nil {
		s.shared.abandon(r) // settled by the session (settleShared)
		return driver.Grant{}, err
	}
	if c.err != nil {
		return driver.Grant{}, fail(ctx, "acquire", c.err)
	}
	res, err := s.judgeRow(c.vals, ss.pid, record)
	switch {
	case err != nil:
		return driver.Grant{}, fail(ctx, "acquire", err)
	case res.pooler:
		return driver.Grant{}, errPooler(res.pid, uint32(ss.pid))
	case !res.granted:
		return driver.Grant{}, fmt.Errorf("%w: %q", driver.ErrTaken, req.Resource)
	}
	return s.newGrant(req, key, sharedHold{sh: s.shared, s: ss, r: r}, res), nil
}

// settleShared runs in the shared session's goroutine once the grant
// statement c of key is answered.
func (s *Store) settleShared(ss *session, c *call, abandoned bool, key int64, q *modeSQL, r *reservation, record bool) {
	if c.err != nil {
		if !isServerError(c.err) {
			s.shared.free(r) // the session ended, and anything it took
			return
		}
		// The statement may have failed after the lock was granted.
		classid, objid := lockID(key)
		_ = ss.send(q.reset, []any{key, classid, objid, q.lockMode}, s.shared.freeAfter(ss, r))
		return
	}
	res, err := s.judgeRow(c.vals, ss.pid, false)
	switch {
	case err != nil || res.pooler:
		ss.abort()
		s.shared.free(r)
	case !res.granted:
		s.shared.free(r)
	case abandoned:
		unlock := q.unlock
		if record {
			unlock = q.unlockRecord
		}
		_ = ss.send(unlock, []any{key, ss.pid}, s.shared.freeAfter(ss, r))
	}
}

// result is the answer of a grant statement.
type result struct {
	pid      int32 // the backend that ran it
	granted  bool
	pooler   bool // the pooler check failed; nothing was taken
	token    uint64
	since    time.Time // the server's clock at the grant
	recorded bool      // the grant wrote the holder's row
}

// grantStatement returns the grant statement of q, the waiting one if wait,
// and its arguments for key and the backend pid the connection reported at
// start-up. With metadata and a holder table, the statement also writes the
// holder's row (record).
func (s *Store) grantStatement(q *modeSQL, wait bool, key int64, metadata string, pid int32) (stmt string, args []any, record bool) {
	args = []any{key, pid, s.poolerCheck}
	stmt = q.try
	if wait {
		stmt = q.wait
	}
	record = metadata != "" && s.holders != nil
	if record {
		stmt = q.tryRecord
		if wait {
			stmt = q.waitRecord
		}
		classid, objid := lockID(key)
		args = append(args, metadata, classid, objid)
	}
	return stmt, args, record
}

// grant runs the grant statement of q on c, the waiting one if wait.
func (s *Store) grant(ctx context.Context, c *pgxpool.Conn, q *modeSQL, wait bool, key int64, metadata string) (result, error) {
	var r result
	var token *int64
	pid := int32(c.Conn().PgConn().PID())
	stmt, args, record := s.grantStatement(q, wait, key, metadata, pid)
	// The last column, which makes the token durable, has done its work
	// on the server.
	if err := c.QueryRow(ctx, stmt, args...).Scan(&r.pid, &token, &r.since, nil); err != nil {
		return r, err
	}
	return s.judge(r, token, pid, record)
}

// judgeRow decodes the row of a grant statement run on a shared session
// (binary values) and judges it.
func (s *Store) judgeRow(vals [][]byte, pid int32, record bool) (result, error) {
	var r result
	rowPID, token, ok, since, err := grantRow(vals)
	if err != nil {
		return r, err
	}
	r.pid, r.since = rowPID, since
	var tok *int64
	if ok {
		tok = &token
	}
	return s.judge(r, tok, pid, record)
}

// judge completes r, read from a grant statement run on a connection that
// reported pid at start-up, with its token.
func (s *Store) judge(r result, token *int64, pid int32, record bool) (result, error) {
	switch {
	case token == nil:
		r.pooler = s.poolerCheck && r.pid != pid
	case *token <= 0:
		return r, fmt.Errorf("granted without a valid token (%d)", *token)
	default:
		r.granted, r.token, r.recorded = true, uint64(*token), record
	}
	return r, nil
}

// newGrant returns the grant of a lock held by the session of h.
func (s *Store) newGrant(req driver.Request, key int64, h keeper, r result) driver.Grant {
	l := &lock{
		store: s, owner: req.Owner, resource: req.Resource, key: key,
		sql: s.sql[req.Mode], pid: r.pid, token: r.token, since: r.since,
		h: h, recorded: r.recorded,
	}
	start := time.Now() // the store's own TTL timer starts after this
	l.hold(req.TTL)
	return driver.Grant{Token: r.token, Handle: l, Start: start}
}

// settle runs after a grant statement failed or was abandoned: it makes sure
// the session holds nothing of key (a statement that fails after the grant
// leaves a session lock held) and gives the connection back to the pool, or
// closes it when that cannot be made sure.
func (s *Store) settle(c *pgxpool.Conn, key int64, q *modeSQL) {
	if c.Conn().IsClosed() {
		c.Release() // the session, and its locks, ended with the connection
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	classid, objid := lockID(key)
	var unlocked bool
	if err := c.QueryRow(ctx, q.reset, key, classid, objid, q.lockMode).Scan(&unlocked); err != nil {
		discard(c)
		return
	}
	c.Release()
}

// discard closes c, ending its session and any lock it holds, and lets the
// pool replace it.
func discard(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = c.Conn().Close(ctx)
	c.Release() // the pool destroys a closed connection
}

func errPooler(pid int32, startPID uint32) error {
	return fmt.Errorf("%w: the session's backend pid %d is not the pid %d the connection started with: "+
		"a connection pooler is in between, and session advisory locks need a direct connection "+
		"(behind a pooler in session mode, use WithPoolerCheck(false); in transaction mode, LockTx)",
		driver.ErrUnsupported, pid, startPID)
}

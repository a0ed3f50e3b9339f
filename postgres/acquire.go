package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
)

// Acquire makes one attempt with pg_try_advisory_lock, without waiting or
// queueing. A granted lock keeps its connection until Release.
func (s *Store) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	key, q, err := s.prepare(req)
	if err != nil {
		return driver.Grant{}, err
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
		err := errPooler(r.pid, c)
		c.Release() // nothing was taken
		return driver.Grant{}, err
	case !r.granted:
		c.Release() // nothing was taken: the connection is clean
		return driver.Grant{}, fmt.Errorf("%w: %q", driver.ErrTaken, req.Resource)
	}
	return s.newGrant(req, key, c, r), nil
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

// grant runs the grant statement of q on c, the waiting one if wait. With
// metadata and a holder table, the statement also writes the holder's row.
func (s *Store) grant(ctx context.Context, c *pgxpool.Conn, q *modeSQL, wait bool, key int64, metadata string) (result, error) {
	var r result
	var token *int64
	pid := int32(c.Conn().PgConn().PID())
	args := []any{key, pid, s.poolerCheck}
	stmt := q.try
	if wait {
		stmt = q.wait
	}
	record := metadata != "" && s.holders != nil
	if record {
		stmt = q.tryRecord
		if wait {
			stmt = q.waitRecord
		}
		classid, objid := lockID(key)
		args = append(args, metadata, classid, objid)
	}
	// The last column, which makes the token durable, has done its work
	// on the server.
	if err := c.QueryRow(ctx, stmt, args...).Scan(&r.pid, &token, &r.since, nil); err != nil {
		return r, err
	}
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

// newGrant returns the grant of a lock held by the session of c.
func (s *Store) newGrant(req driver.Request, key int64, c *pgxpool.Conn, r result) driver.Grant {
	l := &lock{
		store: s, owner: req.Owner, resource: req.Resource, key: key,
		sql: s.sql[req.Mode], pid: r.pid, token: r.token, since: r.since,
		conn: c, recorded: r.recorded,
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

func errPooler(pid int32, c *pgxpool.Conn) error {
	return fmt.Errorf("%w: the session's backend pid %d is not the pid %d the connection started with: "+
		"a connection pooler is in between, and session advisory locks need a direct connection "+
		"(behind a pooler in session mode, use WithPoolerCheck(false); in transaction mode, LockTx)",
		driver.ErrUnsupported, pid, c.Conn().PgConn().PID())
}

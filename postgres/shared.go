package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
)

// shared is the store's set of shared sessions and the keys their locks
// hold. A key is tried on a shared session only when no lock of this store
// holds it on one: PostgreSQL grants a session a lock it already holds, so
// two leases of one process must never ask for a key on the same session.
// Such a second request goes to a connection of its own, where the server
// decides as between any two sessions.
type shared struct {
	pool  *pgxpool.Pool
	slots []slot
	joint map[string]bool // statements that may share a transaction

	mu     sync.Mutex
	keys   map[int64]*reservation
	closed bool
}

// A slot holds one shared session, opened when first needed and opened
// again after it ended.
type slot struct {
	sem  chan struct{} // held while the slot's session is read or opened
	s    *session
	gone []*session // ended sessions whose goroutine may still be finishing
}

// A reservation is a key's place on the shared sessions, held from the
// grant statement until the lock is released or gone. One whose grant
// statement's caller left (abandoned) is being settled: the next
// acquisition of its key waits for it to be freed rather than asking on
// a connection of its own, so that the statement, which may run late,
// cannot take the lock after that acquisition's release.
type reservation struct {
	key       int64
	abandoned bool          // under shared.mu
	freed     chan struct{} // closed by free
}

func newShared(pool *pgxpool.Pool, n int, joint map[string]bool) *shared {
	sh := &shared{pool: pool, slots: make([]slot, n), joint: joint, keys: map[int64]*reservation{}}
	for i := range sh.slots {
		sh.slots[i].sem = make(chan struct{}, 1)
	}
	return sh
}

// reserve takes key's place, or returns nil when a lock of this store holds
// the key on a shared session, or the store is closed; settling is then
// the freed channel of a reservation being settled (see reservation), if
// so.
func (sh *shared) reserve(key int64) (r *reservation, settling <-chan struct{}) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		return nil, nil
	}
	if r := sh.keys[key]; r != nil {
		if r.abandoned {
			return nil, r.freed
		}
		return nil, nil
	}
	r = &reservation{key: key, freed: make(chan struct{})}
	sh.keys[key] = r
	return r, nil
}

// abandon records that the caller of r's grant statement left before its
// answer.
func (sh *shared) abandon(r *reservation) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.keys[r.key] == r {
		r.abandoned = true
	}
}

// free gives r's place up; a reservation freed already is left alone.
func (sh *shared) free(r *reservation) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.keys[r.key] == r {
		delete(sh.keys, r.key)
		close(r.freed)
	}
}

// freeAfter returns the after of a statement that the session ss runs on
// its own to clear r's key (a reset, an unlock nobody waits for): it gives
// r's place up once the statement ran, and ends the session when the
// server refused it, since the lock may then remain.
func (sh *shared) freeAfter(ss *session, r *reservation) func(*call, bool) {
	return func(c *call, _ bool) {
		if c.err != nil && isServerError(c.err) {
			ss.abort()
		}
		sh.free(r)
	}
}

// session returns the live session of key's slot, opening one with a
// connection taken out of the pool when there is none.
func (sh *shared) session(ctx context.Context, key int64) (*session, error) {
	sl := &sh.slots[uint64(key)%uint64(len(sh.slots))]
	select {
	case sl.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-sl.sem }()
	if sl.s != nil && sl.s.ended() == nil {
		return sl.s, nil
	}
	c, err := sh.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed {
		c.Release()
		return nil, errClosed
	}
	if sl.s != nil {
		sl.gone = slices.DeleteFunc(append(sl.gone, sl.s), (*session).stopped)
	}
	// The session keeps the connection for its life, outside the pool's
	// count, so that closing the pool does not wait for it.
	ss, err := openSession(ctx, c.Hijack(), sh.joint)
	if err != nil {
		return nil, err
	}
	sl.s = ss
	return ss, nil
}

// close ends every shared session, which frees their locks, and waits for
// their goroutines.
func (sh *shared) close() {
	sh.mu.Lock()
	sh.closed = true
	sh.mu.Unlock()
	for i := range sh.slots {
		sl := &sh.slots[i]
		sl.sem <- struct{}{}
		if sl.s != nil {
			sl.s.close()
		}
		for _, g := range sl.gone {
			g.close()
		}
		sl.gone = nil
		<-sl.sem
	}
}

var errClosed = fmt.Errorf("%w: postgres: the store is closed", driver.ErrUnavailable)

// sharedHold is the keeper of a lock on a shared session.
type sharedHold struct {
	sh *shared
	s  *session
	r  *reservation
}

func (h sharedHold) query(ctx context.Context, sql string, args []any, dest ...any) error {
	return h.s.query(ctx, sql, args, dest...)
}

// unlock runs the unlock statement; the key's place is given up once the
// server unlocked it, or the session ended. When the caller left before
// the answer and the session could not unlock, the session ends, so that
// the lock cannot remain.
func (h sharedHold) unlock(ctx context.Context, sql string, args []any, dest ...any) error {
	return h.s.queryThen(ctx, sql, args, func(c *call, abandoned bool) {
		var pid int32
		var unlocked *bool
		ok := c.err == nil && scanRow(c.vals, &pid, &unlocked) == nil && unlocked != nil && *unlocked
		switch {
		case ok || (c.err != nil && !isServerError(c.err)):
			h.sh.free(h.r)
		case abandoned:
			h.s.abort()
			h.sh.free(h.r)
		}
	}, dest...)
}

func (h sharedHold) ended() bool { return h.s.ended() != nil }
func (h sharedHold) released()   {}
func (h sharedHold) dropped()    {}

// end ends the shared session: its other locks go with it, and their
// holders learn it at their next Extend, as when a connection breaks.
func (h sharedHold) end() {
	h.s.abort()
	h.sh.free(h.r)
}

// ownHold is the keeper of a lock on a connection of its own.
type ownHold struct{ c *pgxpool.Conn }

func (h ownHold) query(ctx context.Context, sql string, args []any, dest ...any) error {
	return h.c.QueryRow(ctx, sql, args...).Scan(dest...)
}

func (h ownHold) unlock(ctx context.Context, sql string, args []any, dest ...any) error {
	return h.query(ctx, sql, args, dest...)
}

func (h ownHold) ended() bool { return h.c.Conn().IsClosed() }
func (h ownHold) released()   { h.c.Release() }
func (h ownHold) dropped()    { discard(h.c) }
func (h ownHold) end()        { discard(h.c) }

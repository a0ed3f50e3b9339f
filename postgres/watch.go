package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm/driver"
)

var (
	_ driver.Watcher  = (*Store)(nil)
	_ driver.Notifier = (*Store)(nil)
)

// Channel returns the name of the LISTEN/NOTIFY channel of resource:
// "dlm_" and its advisory key (KeyOf) in 16 lower-case hex digits. Any
// session may announce a change with NOTIFY on it.
func Channel(resource string) string {
	const width = 16
	hex := strconv.FormatUint(uint64(KeyOf(resource)), 16)
	for len(hex) < width {
		hex = "0" + hex
	}
	return "dlm_" + hex
}

// Watch listens on the resource's channel (Channel) and returns a channel
// that receives a value for each notification on it (Notify), and also
// every watch interval (WithWatchInterval, 1 s by default) whatever
// happened: PostgreSQL tells nobody when the session holding a lock ends,
// so a holder that vanished is seen within that interval. Signals
// coalesce in a channel of one. Changes that nobody announces (a lock
// taken or released without Notify, by package dlm without elections or
// by other code) are likewise seen only at the interval.
//
// Each Watch takes a connection of its own from the pool, which runs
// LISTEN before Watch returns, so every notification sent after Watch
// returns is signalled; size the pool for it. The channel is closed when
// ctx ends or the connection fails; the connection then goes back to the
// pool after UNLISTEN, or is closed if that fails. Behind a pooler in
// transaction mode LISTEN does not work, and only the interval signals.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if resource == "" {
		return nil, fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fail(ctx, "watch: connect", err)
	}
	channel := Channel(resource)
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		s.unlisten(c, channel)
		return nil, fail(ctx, "watch: listen", err)
	}
	out := make(chan struct{}, 1)
	go s.listen(ctx, c, channel, out)
	return out, nil
}

// listen signals out for each notification on channel that c receives and
// every watch interval, until ctx ends or c fails; then it closes out and
// gives c back.
func (s *Store) listen(ctx context.Context, c *pgxpool.Conn, channel string, out chan<- struct{}) {
	defer close(out)
	ended := make(chan struct{}) // the reader's end; it sends nothing after
	go func() {
		defer close(ended)
		for {
			n, err := c.Conn().WaitForNotification(ctx)
			if err != nil {
				return
			}
			if n != nil && n.Channel == channel {
				signal(out)
			}
		}
	}()
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			signal(out)
		case <-ended:
			s.unlisten(c, channel)
			return
		}
	}
}

// unlisten stops c listening on channel, drops the notifications it has
// buffered, and gives it back to the pool; it closes c instead when that
// fails.
func (s *Store) unlisten(c *pgxpool.Conn, channel string) {
	if c.Conn().IsClosed() {
		c.Release() // the pool drops it
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, err := c.Exec(ctx, "UNLISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		discard(c)
		return
	}
	// With a context that has ended, WaitForNotification returns what is
	// buffered without reading from the server.
	done, stop := context.WithCancel(context.Background())
	stop()
	for {
		if _, err := c.Conn().WaitForNotification(done); err != nil {
			break
		}
	}
	c.Release()
}

// signal sends on out unless a signal is pending already.
func signal(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

// Notify tells the watchers of resource that it changed: one NOTIFY on its
// channel (Channel), through the pool. PostgreSQL delivers it to the
// sessions listening on the channel in this database.
func (s *Store) Notify(ctx context.Context, resource string) error {
	if s.bad != nil {
		return s.bad
	}
	if resource == "" {
		return fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, '')", Channel(resource)); err != nil {
		return fail(ctx, "notify", err)
	}
	return nil
}

package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
)

var (
	_ driver.Watcher  = (*Store)(nil)
	_ driver.Notifier = (*Store)(nil)
)

// watchConfirm bounds the wait for Redis to confirm a watch's subscription
// (the caller's context may end it sooner).
const watchConfirm = 5 * time.Second

// Watch subscribes to the resource's change notices, a Redis pub/sub
// channel named like the resource's keys (<prefix>{resource}:watch), and
// returns once Redis has confirmed the subscription: every Notify after
// that is signalled. The channel also receives a value every watch
// interval (WithWatchInterval, 1 s by default), whether or not anyone
// notified, since a holder whose key expires tells nobody: that interval
// bounds how long such a change goes unseen. Signals coalesce (the channel
// holds one).
//
// Each watch holds one connection of its own, outside the client's pool,
// and sends a PING every interval: the channel is closed when ctx ends,
// when the store is closed, when the connection fails, or when a PING goes
// unanswered for an interval (a hung connection is seen within two
// intervals). Notices published while the connection was down are lost, so
// watch again and read the resource afresh.
//
// The channel is an ordinary (not sharded) pub/sub channel, which Redis
// 6.2 has: on a Cluster, the subscription goes to the resource's shard and
// every notice is broadcast to every node of the cluster.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if resource == "" {
		return nil, fmt.Errorf("%w: empty resource name", driver.ErrInvalid)
	}
	if s.life.Err() != nil {
		return nil, fmt.Errorf("%w: redis watch %q: the store is closed", driver.ErrInvalid, resource)
	}
	wctx, cancel := context.WithCancel(ctx)
	stopLife := context.AfterFunc(s.life, cancel)
	ps := s.rdb.Subscribe(wctx, s.lockKey(resource)+watchSuffix)
	// A cancelled context does not interrupt a read on the subscription's
	// connection; closing the subscription does.
	stopClose := context.AfterFunc(wctx, func() { _ = ps.Close() })
	end := func() {
		stopLife()
		stopClose()
		cancel()
		_ = ps.Close()
	}
	cctx, ccancel := context.WithTimeout(wctx, watchConfirm)
	msg, err := ps.Receive(cctx)
	ccancel()
	if err == nil {
		if _, ok := msg.(*goredis.Subscription); !ok {
			err = fmt.Errorf("unexpected reply %v to SUBSCRIBE", msg)
		}
	}
	if err != nil {
		end()
		return nil, s.fail(ctx, "watch", err)
	}
	out := make(chan struct{}, 1)
	s.pumps.Add(1)
	go func() {
		defer s.pumps.Done()
		defer close(out)
		defer end()
		s.watch(wctx, ps, out)
	}()
	return out, nil
}

// watch relays ps's notices to out, and signals and pings every watch
// interval, until ctx ends or the subscription fails.
func (s *Store) watch(ctx context.Context, ps *goredis.PubSub, out chan<- struct{}) {
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	next := time.Now().Add(s.watchTick)
	pinged := false // a PING awaits its answer
	for {
		if wait := time.Until(next); wait > 0 {
			msg, err := ps.ReceiveTimeout(ctx, wait)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && !timedOut(err):
				return
			}
			switch msg.(type) {
			case *goredis.Message:
				signal()
			case *goredis.Pong:
				pinged = false
			}
			continue
		}
		if pinged {
			return // unanswered for a whole interval: the connection hangs
		}
		signal()
		if ps.Ping(ctx) != nil {
			return
		}
		pinged = true
		next = time.Now().Add(s.watchTick)
	}
}

// timedOut reports whether err is a read that timed out.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Notify tells the resource's watchers that it changed: one PUBLISH on its
// channel. Package dlm calls it after the changes elections make; a plain
// Release does not publish.
func (s *Store) Notify(ctx context.Context, resource string) error {
	if s.bad != nil {
		return s.bad
	}
	if resource == "" {
		return fmt.Errorf("%w: empty resource name", driver.ErrInvalid)
	}
	if err := s.rdb.Publish(ctx, s.lockKey(resource)+watchSuffix, "1").Err(); err != nil {
		return s.fail(ctx, "notify", err)
	}
	return nil
}

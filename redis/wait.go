package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// AcquireWait queues for the lock and blocks until it is granted or ctx
// ends. The release of the lock (or the departure of the waiter ahead)
// pushes a wake-up to the first waiter's own list; waiters also refresh their
// place every queue refresh interval, and the first one retries the moment a
// held key is due to expire.
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	lock := s.lockKey(req.Resource)
	var (
		wakeups <-chan struct{} // nil while no listener runs
		stop    = func() {}
		queue   = queueJoin
	)
	defer func() { stop() }()
	for {
		start := time.Now()
		g, pttl, head, err := s.attempt(ctx, req, queue, wakeups != nil)
		if err == nil {
			g.Start = start // the TTL runs from this attempt's grant
			return g, nil
		}
		if !errors.Is(err, driver.ErrTaken) {
			s.leave(ctx, lock, req.Owner)
			return driver.Grant{}, err
		}
		queue = queueAgain
		if wakeups == nil {
			stop()
			wakeups, stop = s.listen(lock + wakeSuffix + req.Owner)
		}
		pause := s.refresh
		if head && pttl > 0 && pttl+time.Millisecond < pause {
			pause = pttl + time.Millisecond
		}
		t := time.NewTimer(pause)
		select {
		case <-wakeups:
			// The listener delivered its one wake-up and ended: the next
			// attempt does not ask for a "stop", and a failed one starts
			// another listener.
			wakeups = nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.leave(ctx, lock, req.Owner)
			return driver.Grant{}, fmt.Errorf("%w: %q: %w", driver.ErrTaken, req.Resource, ctx.Err())
		}
		t.Stop()
	}
}

// leave takes the waiter out of the queue, on a context that outlives the
// caller's. If Redis cannot be reached the place lapses by itself.
func (s *Store) leave(ctx context.Context, lock, owner string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = redislua.Leave.Run(ctx, s.rdb, []string{lock, lock + queueSuffix, lock + liveSuffix}, owner, s.livenessMS).Err()
}

// listen blocks on the waiter's wake-up list in a goroutine until it pops
// one wake-up, which it signals by closing the returned channel, or pops
// "stop", which the grant and the leave scripts push to a listening
// waiter's list, or until stop is called and its current pop times out
// (one second at most, when Redis could not be told). Close waits for it.
// A listener serves one wake-up: the grant that follows the usual one then
// needs no "stop", nor the pop of it.
func (s *Store) listen(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	s.pumps.Add(1)
	go func() {
		defer s.pumps.Done()
		for ctx.Err() == nil {
			v, err := s.rdb.BLPop(ctx, time.Second, key).Result()
			switch {
			case ctx.Err() != nil, err == nil && len(v) == 2 && v[1] == "stop":
				return
			case err == nil:
				close(ch)
				return
			case errors.Is(err, goredis.Nil):
				// Timed out; block again.
			default:
				// Redis is in trouble: the waiter's refresh timer carries
				// on; do not spin.
				t := time.NewTimer(s.refresh)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
	}()
	return ch, cancel
}

package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

// AcquireWait queues for the lock and blocks until it is granted or ctx
// ends. The release of the lock hands it to the first live waiter and
// pushes the grant to that waiter's own list, on which it blocks; the
// departure of the waiter ahead pushes a wake-up instead, on which the
// waiter tries again. Waiters also refresh their place every queue refresh
// interval, and the first one retries the moment a held key is due to
// expire.
//
// A handed grant's TTL runs, for the caller, from the send time of the
// attempt whose name the release echoes: the latest attempt the release
// saw, so one that Redis ran before it set the TTL, and the deadline errs
// early, never late. When that attempt is older than an eighth of the TTL
// (a long wait between refreshes, or a TTL short against the refresh
// interval), or is not one of the call's latest attempts (a message left
// from an earlier call of the same request), the waiter asks once more
// instead, which renews the TTL it holds from that call: a lease granted
// after a long wait is a full one.
func (s *Store) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := s.check(req); err != nil {
		return driver.Grant{}, err
	}
	lock := s.lockKey(req.Resource)
	var (
		wakeups <-chan wakeup // nil while no listener runs
		stop    = func() {}
		queue   = queueJoin
		sent    recent // the latest attempts' names and send times
	)
	defer func() { stop() }()
	for {
		start := time.Now()
		g, pttl, head, err := s.attempt(ctx, req, queue, wakeups != nil, sent.add(start))
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
		case w := <-wakeups:
			// The listener delivered its one message and ended: the next
			// attempt does not ask for a "stop", and a failed one starts
			// another listener.
			wakeups = nil
			if at, ok := sent.find(w.attempt); w.handed && ok && time.Since(at) <= req.TTL/8 {
				t.Stop()
				g := newGrant(w.token, w.waiting)
				g.Start = at
				return g, nil
			}
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
	_ = s.batch.Run(ctx, redislua.Leave, []string{lock, lock + queueSuffix, lock + liveSuffix}, owner, s.livenessMS).Err()
}

// wakeup is what a waiter's wake-up list told it: its turn to try
// (handed false), or the lock itself, handed to it by the release.
type wakeup struct {
	handed  bool
	token   uint64
	waiting bool   // live waiters queue behind the handed grant
	attempt string // the name of the attempt the release saw
}

// parseWakeup reads one entry of a wake-up list: "1", or "g <token>
// <waiting> <attempt>" for a handed lock. An entry it cannot read is a
// plain wake-up, on which the waiter asks for itself.
func parseWakeup(v string) wakeup {
	f := strings.Fields(v)
	if len(f) != 4 || f[0] != "g" {
		return wakeup{}
	}
	token, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || token == 0 {
		return wakeup{}
	}
	return wakeup{handed: true, token: token, waiting: f[2] != "0", attempt: f[3]}
}

// recent remembers the names and send times of a waiter's latest attempts.
// A name is the send time's wall clock in nanoseconds, so that a name left
// in Redis by an earlier call of the same request matches none of this
// call's (which began later).
type recent struct {
	names [3]string
	times [3]time.Time
	next  int
}

// add records an attempt sent at t and returns its name.
func (r *recent) add(t time.Time) string {
	name := strconv.FormatInt(t.UnixNano(), 10)
	r.names[r.next], r.times[r.next] = name, t
	r.next = (r.next + 1) % len(r.names)
	return name
}

// find returns the send time of the attempt named name, if it is one of
// the latest.
func (r *recent) find(name string) (time.Time, bool) {
	for i, n := range r.names {
		if n != "" && n == name {
			return r.times[i], true
		}
	}
	return time.Time{}, false
}

// listen blocks on the waiter's wake-up list in a goroutine until it pops
// one message, which it delivers on the returned channel (buffered: the
// listener never waits for the waiter), or pops "stop", which the grant and
// the leave scripts push to a listening waiter's list, or until stop is
// called and its current pop times out (one second at most, when Redis
// could not be told). Close waits for it. A listener serves one message:
// the grant that follows a wake-up then needs no "stop", nor the pop of it.
func (s *Store) listen(key string) (<-chan wakeup, func()) {
	ch := make(chan wakeup, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s.pumps.Add(1)
	go func() {
		defer s.pumps.Done()
		for ctx.Err() == nil {
			v, err := s.rdb.BLPop(ctx, time.Second, key).Result()
			switch {
			case ctx.Err() != nil, err == nil && len(v) == 2 && v[1] == "stop":
				return
			case err == nil && len(v) == 2:
				ch <- parseWakeup(v[1])
				return
			case err == nil, errors.Is(err, goredis.Nil):
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

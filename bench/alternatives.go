package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlmhq/dlm/internal/workload"
)

// The adapters below drive the libraries users would otherwise pick, each as
// its documentation shows, through the workloads' Locker interface. Every
// lock is taken with the TTL dlm's waiters use (workload.WaitTTL).

// redsyncLocker drives go-redsync/redsync: TryLock without waiting; Lock
// with waiting, retried every retry (or, when retry is 0, after redsync's
// default random 50 to 250 ms) for as long as it takes.
type redsyncLocker struct {
	rs    *redsync.Redsync
	retry time.Duration
}

func (l redsyncLocker) Lock(ctx context.Context, _ int, name string, wait bool) (workload.Unlock, error) {
	opts := []redsync.Option{redsync.WithExpiry(workload.WaitTTL)}
	var err error
	m := l.rs.NewMutex(name, opts...)
	if wait {
		opts = append(opts, redsync.WithTries(math.MaxInt32))
		if l.retry > 0 {
			opts = append(opts, redsync.WithRetryDelay(l.retry))
		}
		m = l.rs.NewMutex(name, opts...)
		err = m.LockContext(ctx)
	} else {
		err = m.TryLockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			err = errors.Join(workload.ErrBusy, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: %s was not held at unlock", name)
		}
		return err
	}, nil
}

// redislockLocker drives bsm/redislock: Obtain with NoRetry without
// waiting; with waiting, Obtain with a linear backoff of retry.
type redislockLocker struct {
	c     *redislock.Client
	retry time.Duration
}

// obtainLimit bounds one waiting Obtain: redislock gives up at the TTL when
// the context has no deadline, and a waiter of a polling lock may wait
// longer than that.
const obtainLimit = time.Minute

func (l redislockLocker) Lock(ctx context.Context, _ int, name string, wait bool) (workload.Unlock, error) {
	strategy := redislock.NoRetry()
	if wait {
		strategy = redislock.LinearBackoff(l.retry)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, obtainLimit)
		defer cancel()
	}
	lock, err := l.c.Obtain(ctx, name, workload.WaitTTL, &redislock.Options{RetryStrategy: strategy})
	if err != nil {
		if errors.Is(err, redislock.ErrNotObtained) && !wait {
			err = errors.Join(workload.ErrBusy, err)
		}
		return nil, err
	}
	return lock.Release, nil
}

// etcdLocker drives etcd's concurrency.Mutex, with a session (a lease) per
// worker, as the package wants: a mutex's owner is its session.
type etcdLocker struct {
	cli      *clientv3.Client
	sessions perWorker[*concurrency.Session]
}

func (l *etcdLocker) Prepare(ctx context.Context, workers int) error {
	return l.sessions.prepare(ctx, workers, func(ctx context.Context) (*concurrency.Session, error) {
		return concurrency.NewSession(l.cli, concurrency.WithTTL(int(workload.WaitTTL/time.Second)), concurrency.WithContext(ctx))
	})
}

func (l *etcdLocker) Lock(ctx context.Context, w int, name string, wait bool) (workload.Unlock, error) {
	m := concurrency.NewMutex(l.sessions.get(w), "/bench-mutex/"+name)
	var err error
	if wait {
		err = m.Lock(ctx)
	} else if err = m.TryLock(ctx); errors.Is(err, concurrency.ErrLocked) {
		err = errors.Join(workload.ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// Close ends the sessions (revoking their leases).
func (l *etcdLocker) Close() {
	l.sessions.close(func(s *concurrency.Session) { s.Close() })
}

// pgLocker takes PostgreSQL session advisory locks through pgx, with a
// connection per worker (an advisory lock belongs to its connection):
// pg_try_advisory_lock without waiting, pg_advisory_lock with waiting (the
// server queues the waiter), pg_advisory_unlock to release. The key is the
// name's 64-bit FNV-1a hash.
type pgLocker struct {
	dsn   string
	conns perWorker[*pgx.Conn]
}

func (l *pgLocker) Prepare(ctx context.Context, workers int) error {
	return l.conns.prepare(ctx, workers, func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, l.dsn) })
}

func pgKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func (l *pgLocker) Lock(ctx context.Context, w int, name string, wait bool) (workload.Unlock, error) {
	c, key := l.conns.get(w), pgKey(name)
	if wait {
		if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			return nil, err
		}
	} else {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil {
			return nil, err
		}
		if !ok {
			return nil, workload.ErrBusy
		}
	}
	return func(ctx context.Context) error {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pgx: advisory lock %s was not held at unlock", name)
		}
		return nil
	}, nil
}

// Close closes the connections, which releases their locks.
func (l *pgLocker) Close() {
	l.conns.close(func(c *pgx.Conn) { c.Close(context.Background()) })
}

// perWorker holds one T per worker (an etcd session, a connection), made
// before the workload's clock starts.
type perWorker[T any] struct {
	mu    sync.Mutex
	items []T
}

// prepare makes items with open until there is one per worker.
func (p *perWorker[T]) prepare(ctx context.Context, workers int, open func(context.Context) (T, error)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.items) < workers {
		it, err := open(ctx)
		if err != nil {
			return err
		}
		p.items = append(p.items, it)
	}
	return nil
}

// get returns worker w's item.
func (p *perWorker[T]) get(w int) T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.items[w]
}

// close ends every item with end and forgets them.
func (p *perWorker[T]) close(end func(T)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range p.items {
		end(it)
	}
	p.items = nil
}

// redisClients opens one go-redis client per address.
func redisClients(addrs []string) []*goredis.Client {
	cs := make([]*goredis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = goredis.NewClient(&goredis.Options{Addr: a}) // go-redis defaults, as dlm's redis store uses them
	}
	return cs
}

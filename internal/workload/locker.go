package workload

import (
	"context"
	"errors"
	"time"

	"github.com/dlmhq/dlm"
)

// Unlock releases one acquisition.
type Unlock func(ctx context.Context) error

// Locker is a lock implementation as the workloads drive it. The workers
// call Lock concurrently, each with its own index w (0 to workers-1), so an
// implementation whose ownership lives in a session or a connection (an
// etcd session, a PostgreSQL connection) can keep one per worker.
type Locker interface {
	// Lock acquires name for worker w. With wait false, it fails at once
	// (with an error matching ErrBusy) if another holds name; with wait
	// true, it waits until it gets name or ctx ends.
	Lock(ctx context.Context, w int, name string, wait bool) (Unlock, error)
}

// Preparer is implemented by a Locker that sets up its workers (sessions,
// connections) before a workload starts its clock.
type Preparer interface {
	Prepare(ctx context.Context, workers int) error
}

// ErrBusy is what a Locker returns, wrapped or matched by errors.Is, when
// a lock asked for without waiting is held by another.
var ErrBusy = errors.New("workload: lock held by another")

// WaitTTL is the TTL of the locks Client takes for waiters: long enough that
// no turn of a contended workload outlives its lock.
const WaitTTL = 5 * time.Second

// Client drives a *dlm.Client: Lock without waiting is Acquire with
// dlm.WithWait(0); Lock with waiting is Acquire with a TTL of WaitTTL. opts
// come after those and may override them.
func Client(c *dlm.Client, opts ...dlm.Option) Locker { return clientLocker{c, opts} }

type clientLocker struct {
	c    *dlm.Client
	opts []dlm.Option
}

func (cl clientLocker) Lock(ctx context.Context, _ int, name string, wait bool) (Unlock, error) {
	first := dlm.WithWait(0)
	if wait {
		first = dlm.WithTTL(WaitTTL)
	}
	l, err := cl.c.Acquire(ctx, name, append([]dlm.Option{first}, cl.opts...)...)
	if err != nil {
		if errors.Is(err, dlm.ErrNotAcquired) {
			err = errors.Join(ErrBusy, err)
		}
		return nil, err
	}
	return l.Release, nil
}

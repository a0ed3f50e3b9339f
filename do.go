package dlm

import (
	"context"
	"errors"
)

// Do acquires the lock on resource, runs fn while holding it, and releases
// it when fn returns or panics. The lease renews itself while fn runs
// (unless WithAutoRenew(false) is given), and fn's context is cancelled the
// moment the lock is lost, with the loss as its cause (context.Cause).
//
// Do returns Acquire's error if the lock was not acquired. Otherwise it
// returns fn's error, joined with the loss (ErrLost) if the lock was lost
// while fn ran, and with the release's error if the release failed.
func (c *Client) Do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return c.do(ctx, resource, fn, []Option{WithAutoRenew(true)}, opts)
}

func (c *Client) do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, base, opts []Option) (err error) {
	l, err := c.acquire(ctx, resource, base, opts)
	if err != nil {
		return err
	}
	work, stop := whileHeld(ctx, l)
	defer func() {
		stop()
		rctx, rcancel := c.clock.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		rerr := l.Release(rctx)
		rcancel()
		if r := recover(); r != nil {
			panic(r)
		}
		if rerr != nil && !errors.Is(err, rerr) {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(work, l)
}

// whileHeld returns a context that is cancelled, with the loss as its
// cause, the moment l is lost (or when ctx ends), and the function that
// cancels it and waits for its watcher to end.
func whileHeld(ctx context.Context, l *Lease) (context.Context, func()) {
	work, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Lost():
			cancel(l.Err())
		case <-work.Done():
		}
	}()
	return work, func() {
		cancel(nil)
		<-watched
	}
}

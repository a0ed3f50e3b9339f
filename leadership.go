package dlm

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// Leadership is a candidate's term as leader of an election: a held,
// self-renewing exclusive lease whose fencing token is the term. It ends by
// Resign, or by loss: Lost() is closed the moment the leader can no longer
// be sure that it leads, before the store could elect anyone else (the
// lease's conservative deadline, see Lease). Stop the leader's work then.
// It is safe for concurrent use.
type Leadership struct {
	e     *Election
	lease *Lease
}

// Campaign blocks until this candidate leads the election with value, and
// returns its leadership; the caller must Resign it (or let it be lost).
// Candidates are served in the order they asked where the store queues.
// Campaign ends with the errors of Client.Acquire: ErrNotAcquired joined
// with ctx.Err() when ctx ended the wait (or the wait of WithWait ran out),
// ErrUnavailable when the store stayed unreachable for the unavailable
// timeout, ErrInvalid for an empty or oversized name or a value longer than
// MaxMetadataBytes.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	l, err := e.c.acquire(ctx, e.name, nil, e.campaignOptions(value))
	if err != nil {
		return nil, err
	}
	e.notify(ctx)
	return &Leadership{e: e, lease: l}, nil
}

// Term returns the leadership's term: its fencing token, greater than the
// term of every earlier leader of the election. Hand it to what the leader
// writes to, which should refuse a term lower than one it has seen.
func (l *Leadership) Term() uint64 { return l.lease.Token() }

// Value returns the leader's value: the campaign's, or the last proclaimed.
func (l *Leadership) Value() string { return l.lease.Metadata() }

// Election returns the election led.
func (l *Leadership) Election() *Election { return l.e }

// Lease returns the lease that holds the leadership.
func (l *Leadership) Lease() *Lease { return l.lease }

// Lost returns a channel closed when the leadership is lost. It is never
// closed for a leadership that is resigned while held.
func (l *Leadership) Lost() <-chan struct{} { return l.lease.Lost() }

// Err returns why the leadership was lost (an error matching ErrLost), or
// nil.
func (l *Leadership) Err() error { return l.lease.Err() }

// Resign ends the leadership at once, so that the next candidate in line is
// elected without waiting for a TTL. Resigning twice is not an error;
// resigning a lost leadership returns its loss.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.lease.Release(ctx)
	if err == nil {
		l.e.notify(ctx)
	}
	return err
}

// Proclaim changes the leader's value without an election: observers see
// the same term with the new value. It fails with ErrUnsupported on a store
// that cannot change a held lock's metadata (driver.Relabeler), ErrInvalid
// for a value longer than MaxMetadataBytes, and with an error matching
// ErrLost when the store no longer holds the leadership, which is then
// lost.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	rl, ok := l.e.c.drv.(driver.Relabeler)
	switch {
	case !ok:
		return fmt.Errorf("%w: the %s store cannot change a held lock's metadata", ErrUnsupported, l.e.c.store)
	case len(value) > MaxMetadataBytes:
		return fmt.Errorf("%w: value is %d bytes, the limit is %d", ErrInvalid, len(value), MaxMetadataBytes)
	}
	le := l.lease
	le.mu.Lock()
	if err := le.usableLocked(); err != nil {
		le.mu.Unlock()
		return err
	}
	req, g := le.req, le.grant
	le.mu.Unlock()
	err := rl.Relabel(ctx, req, g, value)
	le.mu.Lock()
	switch {
	case err == nil:
		if le.held {
			le.req.Metadata = value
		}
		err = le.usableLocked()
	case errors.Is(err, driver.ErrNotHeld):
		le.loseLocked(fmt.Errorf("%w: the store no longer holds %q for this leader: %w", ErrLost, req.Resource, err))
		err = le.err
	}
	le.mu.Unlock()
	if err == nil {
		l.e.notify(ctx)
	}
	return err
}

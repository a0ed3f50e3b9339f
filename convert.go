package dlm

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// Convert changes the lease's lock mode, up (PR to EX, say) or down,
// waiting until the new mode can be granted or ctx ends. An up-conversion
// gets a new, larger fencing token. Conversions of held locks are served
// before new requests.
//
// It returns ErrUnsupported for stores without conversion and for
// semaphores, ErrDeadlock when the conversion would deadlock, and
// ErrNotAcquired joined with ctx.Err() when ctx ends first; in every failed
// case the lock stays held in its old mode.
func (l *Lease) Convert(ctx context.Context, mode Mode) error {
	conv, ok := l.c.drv.(driver.Converter)
	switch {
	case !mode.Valid():
		return fmt.Errorf("%w: unknown lock mode %d", ErrInvalid, uint8(mode))
	case !ok:
		return fmt.Errorf("%w: the %s store cannot convert locks", ErrUnsupported, l.c.store)
	case l.req.Capacity > 0:
		return fmt.Errorf("%w: a semaphore has no modes to convert", ErrUnsupported)
	}
	l.mu.Lock()
	if err := l.usableLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	req, g := l.req, l.grant
	l.mu.Unlock()
	ng, err := conv.Convert(ctx, req, g, mode)
	switch {
	case err == nil:
	case errors.Is(err, driver.ErrTaken):
		err = fmt.Errorf("%w: %q was not converted to %s: %w", ErrNotAcquired, req.Resource, mode, err)
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(err, cerr)
		}
		return err
	default:
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if uerr := l.usableLocked(); uerr != nil {
		return uerr
	}
	l.req.Mode = mode
	l.grant = ng
	l.watching = false // a fresh Blocking, watched when asked for
	return nil
}

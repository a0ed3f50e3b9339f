package dlm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlmhq/dlm/internal/errline"
)

// outage follows one call's view of its store's unavailability: since when
// the store has failed every attempt, and whether that was logged.
type outage struct {
	c        *Client
	resource string
	bound    time.Duration // negative: no bound
	since    time.Time     // zero while the store answers
	logged   bool
}

// answered notes an answer of the store, which ends an outage.
func (o *outage) answered() {
	if !o.since.IsZero() && o.logged {
		o.c.log.Info("dlm: the store answers again", "store", o.c.store, "resource", o.resource,
			"after", time.Since(o.since).Round(time.Millisecond))
	}
	o.since, o.logged = time.Time{}, false
}

// failed notes an attempt begun at start that got no answer, and reports
// whether the store has now been unreachable for the bound.
func (o *outage) failed(start time.Time) bool {
	if o.since.IsZero() {
		o.since = start
	}
	return o.bound >= 0 && time.Since(o.since) >= o.bound
}

// retrying logs, once per outage, that the store is unreachable and that
// the call retries.
func (o *outage) retrying(err error) {
	if o.since.IsZero() || o.logged {
		return
	}
	o.logged = true
	until := "until the call ends"
	if o.bound >= 0 {
		until = "for up to " + o.bound.String()
	}
	o.c.log.Warn("dlm: the store is unreachable; retrying "+until, "store", o.c.store, "resource", o.resource, "err", err)
}

// bounded returns the context of a single attempt: ctx, ending when what
// is left of the bound runs out.
func (o *outage) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.bound <= 0 {
		return ctx, func() {}
	}
	left := o.bound
	if !o.since.IsZero() {
		left -= time.Since(o.since)
	}
	return context.WithTimeout(ctx, max(left, time.Millisecond))
}

// err is the error of a call that gave up on an unreachable store after
// last.
func (o *outage) err(last error) error {
	return &unreachableError{store: o.c.store, bound: o.bound, last: last}
}

// unreachableError is the error of a call that gave up on a store that
// stayed unreachable for the unavailable timeout. It matches
// ErrUnavailable and wraps the store's last error.
type unreachableError struct {
	store string
	bound time.Duration
	last  error
}

func (e *unreachableError) Error() string {
	// The store's error usually begins with ErrUnavailable's text too.
	last := errline.OneLine(strings.TrimPrefix(e.last.Error(), ErrUnavailable.Error()+": "))
	if e.bound == 0 {
		return fmt.Sprintf("%v: the %s store did not answer (no retries): %s", ErrUnavailable, e.store, last)
	}
	return fmt.Sprintf("%v: the %s store was unreachable for %s: %s", ErrUnavailable, e.store, e.bound, last)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnavailable, e.last} }

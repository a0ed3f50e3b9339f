package dlm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dlmhq/dlm/driver/alarm"
)

// outage follows one call's view of its store's unavailability: since when
// the store has failed every attempt, and whether that was logged.
type outage struct {
	log      *slog.Logger
	store    string // the store's kind, for the log and the error
	resource string
	bound    time.Duration // negative: no bound
	since    time.Time     // zero while the store answers
	logged   bool
	clock    *alarm.Clock // the client's: the bound's timer
}

// answered notes an answer of the store, which ends an outage.
func (o *outage) answered() {
	if !o.since.IsZero() && o.logged {
		o.log.Info("dlm: the store answers again", "store", o.store, "resource", o.resource,
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
	o.log.Warn("dlm: the store is unreachable; retrying "+until, "store", o.store, "resource", o.resource, "err", err)
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
	left = max(left, time.Millisecond)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= left {
		return ctx, func() {} // ctx ends the attempt first: no timer of its own
	}
	return o.clock.WithTimeout(ctx, left)
}

// err is the error of a call that gave up on an unreachable store after
// last.
func (o *outage) err(last error) error {
	return &UnreachableError{Store: o.store, For: o.bound, Last: last}
}

// UnreachableError is the error of a call that gave up on a store that
// stayed unreachable for its unavailable timeout (see
// WithUnavailableTimeout). It matches ErrUnavailable and wraps the store's
// last error; its message is one line.
type UnreachableError struct {
	Store string        // the kind of store ("redis", "postgres", "dlm"...)
	For   time.Duration // how long it stayed unreachable: the bound (0: no retries)
	Last  error         // the store's last error
}

// Error says which store was unreachable, for how long, and why, on one
// line.
func (e *UnreachableError) Error() string {
	// The store's error usually begins with ErrUnavailable's text too.
	last := oneLine(strings.TrimPrefix(e.Last.Error(), ErrUnavailable.Error()+": "))
	if e.For == 0 {
		return fmt.Sprintf("%v: the %s store did not answer (no retries): %s", ErrUnavailable, e.Store, last)
	}
	return fmt.Sprintf("%v: the %s store was unreachable for %s: %s", ErrUnavailable, e.Store, e.For, last)
}

// Unwrap returns ErrUnavailable and the store's last error.
func (e *UnreachableError) Unwrap() []error { return []error{ErrUnavailable, e.Last} }

// oneLine joins the lines of an error message (such as a driver's that
// lists each address it tried, one per line) into one line: "a:\n\tb\n\tc"
// becomes "a: b; c".
func oneLine(msg string) string {
	var b strings.Builder
	prev := ""
	for line := range strings.Lines(msg) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		switch {
		case prev == "":
		case strings.HasSuffix(prev, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
		prev = line
	}
	return b.String()
}

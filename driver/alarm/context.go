package alarm

import (
	"context"
	"time"
)

// WithTimeout is context.WithTimeout on the clock: a context that ends when
// parent does or once d has passed, whichever comes first, without a
// runtime timer of its own. Its Deadline is the earlier of parent's and the
// end of d, and its Err, once d has passed, context.DeadlineExceeded, as
// with context.WithTimeout. Cancel it as soon as the work it bounds is done.
//
// A context derived from it that it ends by its time says
// context.Canceled, not context.DeadlineExceeded, with context.Cause
// matching context.DeadlineExceeded.
func (c *Clock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(d)
	if cur, ok := parent.Deadline(); ok && !cur.After(deadline) {
		return context.WithCancel(parent) // parent ends first
	}
	inner, cancel := context.WithCancelCause(parent)
	a := c.At(deadline, func() { cancel(expired{}) })
	return &deadlineCtx{Context: inner, deadline: deadline}, func() {
		a.Stop()
		cancel(context.Canceled)
	}
}

// deadlineCtx is a context with a deadline that its clock enforces.
type deadlineCtx struct {
	context.Context // cancelled at the deadline with the cause expired{}
	deadline        time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Err() error {
	err := c.Context.Err()
	if err == context.Canceled && context.Cause(c.Context) == error(expired{}) {
		return context.DeadlineExceeded
	}
	return err
}

// expired is the cause of a context that its clock ended: it reads as, and
// matches, context.DeadlineExceeded.
type expired struct{}

func (expired) Error() string        { return context.DeadlineExceeded.Error() }
func (expired) Is(target error) bool { return target == context.DeadlineExceeded }
func (expired) Timeout() bool        { return true }
func (expired) Temporary() bool      { return true }

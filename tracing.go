package dlm

import "context"

// Tracer traces the client's Acquire and Release calls, for instance as
// OpenTelemetry spans (package dlmotel provides one). It is set with
// WithTracer; the default traces nothing and costs no allocation.
//
// Each Start method is called when a call begins and returns the context the
// call then runs with, which it passes on to the store, so that the store's
// own instrumentation nests under the caller's span. The returned function
// ends the span; the client calls it exactly once, when the call returns.
// Implementations must be safe for concurrent use. store is the store's name
// (such as "redis"), as in Metrics.
type Tracer interface {
	// StartAcquire is called when an Acquire (or the acquire of a Do)
	// begins, before the store is asked; an invalid call is traced too and
	// ends at once with its ErrInvalid error. mode is the requested mode (EX
	// unless WithMode says otherwise; a semaphore ignores it). The call,
	// waiting and retries included, runs with the returned context.
	//
	// end receives the grant's fencing token (0 when nothing was granted),
	// the outcome as in Metrics.Acquired, and the error Acquire returns:
	// nil when acquired, an error matching ErrNotAcquired when contended.
	StartAcquire(ctx context.Context, store, resource string, mode Mode) (_ context.Context, end func(token uint64, outcome Outcome, err error))

	// StartRelease is called when the Release of a held lease begins; a
	// Release of a lease already released or lost returns at once and is not
	// traced. mode and token are the lease's. The store's release runs with
	// the returned context.
	//
	// end receives the error Release returns.
	StartRelease(ctx context.Context, store, resource string, mode Mode, token uint64) (_ context.Context, end func(err error))
}

// nopTracer is the default Tracer. Its methods return the caller's context
// and static functions, so that an untraced call allocates nothing for
// tracing.
type nopTracer struct{}

func (nopTracer) StartAcquire(ctx context.Context, _, _ string, _ Mode) (context.Context, func(uint64, Outcome, error)) {
	return ctx, nopEndAcquire
}

func (nopTracer) StartRelease(ctx context.Context, _, _ string, _ Mode, _ uint64) (context.Context, func(error)) {
	return ctx, nopEndRelease
}

func nopEndAcquire(uint64, Outcome, error) {}
func nopEndRelease(error)                  {}

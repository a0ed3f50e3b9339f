package dlm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
)

// Client acquires locks from one store. It is safe for concurrent use.
type Client struct {
	drv      driver.Driver
	store    string
	log      *slog.Logger
	metrics  Metrics
	tracer   Tracer
	defaults []Option
	// clock runs the attempts' bounds and the leases' deadlines on one
	// runtime timer (see package alarm).
	clock alarm.Clock
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithLogger sets the logger for renewals, losses and failed releases. The
// default discards everything.
func WithLogger(l *slog.Logger) ClientOption { return func(c *Client) { c.log = l } }

// WithMetrics sets the metrics sink. The default records nothing.
func WithMetrics(m Metrics) ClientOption { return func(c *Client) { c.metrics = m } }

// WithDefaults sets options that apply to every call before the call's own.
func WithDefaults(opts ...Option) ClientOption {
	return func(c *Client) { c.defaults = append(c.defaults, opts...) }
}

// WithStoreName sets the store's name used in metrics and logs. The default
// is the store's own name, or "store".
func WithStoreName(name string) ClientOption { return func(c *Client) { c.store = name } }

// New returns a client over the store d.
func New(d driver.Driver, opts ...ClientOption) *Client {
	c := &Client{drv: d, store: "store", metrics: nopMetrics{}, tracer: nopTracer{}}
	if n, ok := d.(driver.Namer); ok {
		c.store = n.Name()
	}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.metrics == nil {
		c.metrics = nopMetrics{}
	}
	if c.tracer == nil {
		c.tracer = nopTracer{}
	}
	return c
}

// Owner groups the acquisitions of one unit of work (a request handler, a
// job, a transaction) so that a store with deadlock detection can see the
// unit as one owner. Without an Owner every acquisition is an owner of its
// own, and the commonest deadlock, A holding x and waiting for y while B
// holds y and waits for x, never forms a cycle in the store's graph: both
// wait until their wait ends. Through Owners, the request that would close
// the cycle fails at once with ErrDeadlock.
//
// The dlm server and the memory store detect deadlocks (across processes
// for the dlm server); other stores ignore the grouping. An Owner is not
// re-entrant: asking again, in a conflicting mode, for a lock it already
// holds makes it wait for itself, which those stores refuse at once with
// ErrDeadlock rather than let it hang; a compatible mode (PR twice) is a
// second lock. Use one Owner per thread of control: two goroutines acting
// for one Owner may be refused as a deadlock when they merely wait for each
// other's locks. An Owner is safe for concurrent use and costs nothing to
// create; it holds no resources of its own.
type Owner struct {
	c  *Client
	id string
}

// Owner returns a new owner of acquisitions on c's store.
func (c *Client) Owner() *Owner { return &Owner{c: c, id: newOwner()} }

// ID returns the owner's identifier: 128 random bits in hex.
func (o *Owner) ID() string { return o.id }

// Acquire is Client.Acquire for this owner.
func (o *Owner) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return o.c.acquire(ctx, resource, []Option{o.option()}, opts)
}

// Do is Client.Do for this owner.
func (o *Owner) Do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return o.c.do(ctx, resource, fn, []Option{WithAutoRenew(true), o.option()}, opts)
}

func (o *Owner) option() Option { return func(c *config) { c.group = o.id } }

// config builds the settings of one call: defaults, then the client's, then
// the call's own options.
func (c *Client) config(resource string, base []Option, opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, list := range [][]Option{base, c.defaults, opts} {
		for _, o := range list {
			if o != nil {
				o(&cfg)
			}
		}
	}
	return cfg, cfg.validate(resource)
}

// Acquire takes the lock on resource and returns its lease. While someone
// else holds the lock it keeps trying for the wait (WithWait), until ctx ends
// when no wait is given. While the store does not answer it retries for at
// most the unavailable timeout (WithUnavailableTimeout, 30 s by default),
// and logs one warning when the store becomes unreachable. The caller must
// Release the lease.
//
// Errors: ErrNotAcquired when the lock stayed held (joined with ctx.Err()
// when the context ended the wait); ErrUnavailable when the store could not
// be reached, joined likewise, or when it stayed unreachable for the
// unavailable timeout; ErrInvalid or ErrUnsupported at once for a call that
// can never succeed.
func (c *Client) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return c.acquire(ctx, resource, nil, opts)
}

func (c *Client) acquire(ctx context.Context, resource string, base, opts []Option) (*Lease, error) {
	began := time.Now()
	cfg, err := c.config(resource, base, opts)
	ctx, end := c.tracer.StartAcquire(ctx, c.store, resource, cfg.mode)
	if err != nil {
		c.metrics.Acquired(c.store, OutcomeFailed, time.Since(began))
		end(0, OutcomeFailed, err)
		return nil, err
	}
	if cfg.capacity > 0 && !driver.Has(c.drv, driver.FeatureSemaphores) {
		err := fmt.Errorf("%w: the %s store has no semaphores", ErrUnsupported, c.store)
		c.metrics.Acquired(c.store, OutcomeFailed, time.Since(began))
		end(0, OutcomeFailed, err)
		return nil, err
	}
	req := driver.Request{
		Resource: resource,
		Owner:    newOwner(),
		Mode:     cfg.mode,
		TTL:      cfg.ttl,
		Metadata: cfg.metadata,
		Capacity: cfg.capacity,
		Permits:  cfg.permits,
		Group:    cfg.group,
	}
	l, err := c.attempts(ctx, req, &cfg, began)
	outcome := OutcomeAcquired
	var token uint64
	switch {
	case err == nil:
		token = l.Token()
	case errors.Is(err, ErrNotAcquired):
		outcome = OutcomeContended
	default:
		outcome = OutcomeFailed
	}
	c.metrics.Acquired(c.store, outcome, time.Since(began))
	end(token, outcome, err)
	return l, err
}

// attempts runs attempts until one is granted, the wait ends, the store
// stays unreachable for the unavailable timeout, or an attempt fails in a
// way that retrying cannot mend (invalid, unsupported, deadlock).
//
// A store that waits natively is asked to wait only once it has answered in
// this call: until then each attempt is a single one, bounded by what is
// left of the unavailable timeout, so that a store that accepts and never
// answers cannot hold the call longer than that.
//
// began is when the call began, which the first attempt takes for its
// start: a lease counts its TTL from no later than its request.
func (c *Client) attempts(ctx context.Context, req driver.Request, cfg *config, began time.Time) (*Lease, error) {
	waitCtx := ctx
	if cfg.wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, cfg.wait)
		defer cancel()
	}
	waiter, native := c.drv.(driver.Waiter)
	native = native && cfg.wait != 0
	out := outage{log: c.log, store: c.store, resource: req.Resource, bound: cfg.unavailable, clock: &c.clock}
	var last error
	unsure := false   // an attempt failed without a clear answer
	answered := false // the store answered since it last failed
	giveUp := func() error {
		if unsure {
			// The grant may have happened with its reply lost. Release is
			// owner-checked, so this is safe.
			c.cleanup(ctx, req, driver.Grant{})
		}
		return c.giveUp(ctx, req, last)
	}
	for attempt, start := 1, began; ; attempt, start = attempt+1, time.Now() {
		var g driver.Grant
		var err error
		cut := false // the bound ended the attempt
		if native && answered {
			g, err = waiter.AcquireWait(waitCtx, req)
		} else {
			actx, cancel := out.bounded(waitCtx)
			g, err = c.drv.Acquire(actx, req)
			cut = actx.Err() != nil && waitCtx.Err() == nil
			cancel()
		}
		switch {
		case err == nil:
			out.answered()
			return c.newLease(req, g, cfg, start), nil
		case errors.Is(err, driver.ErrTaken):
			out.answered()
			last = err
			if native && !answered {
				// The store answers: queue in it at once.
				answered = true
				attempt--
				continue
			}
		case errors.Is(err, driver.ErrInvalid), errors.Is(err, driver.ErrUnsupported),
			errors.Is(err, driver.ErrDeadlock):
			return nil, err
		case waitCtx.Err() != nil && errors.Is(err, waitCtx.Err()):
			// The wait ended during the attempt; the last answer stands.
			// With no answer at all: if the caller's context ended, the
			// call is simply not acquired; if only the wait ran out, the
			// store did not answer within it.
			unsure = true
			if last == nil && ctx.Err() == nil {
				last = fmt.Errorf("%w: no answer before the wait ended: %w", ErrUnavailable, err)
			}
		default:
			unsure, answered = true, false
			// An attempt cut short by the bound keeps the failure before
			// it, which says more than the deadline.
			switch {
			case !cut:
				last = err
			case last == nil || errors.Is(last, driver.ErrTaken):
				// The deadline is the bound's, not the caller's: not wrapped.
				last = fmt.Errorf("%w: no answer within %s (%v)", ErrUnavailable, cfg.unavailable, err)
			}
			if out.failed(start) {
				c.cleanup(ctx, req, driver.Grant{})
				return nil, out.err(last)
			}
		}
		if cfg.wait == 0 || waitCtx.Err() != nil {
			return nil, giveUp()
		}
		pause := cfg.retry.Backoff(attempt)
		if pause < 0 {
			return nil, giveUp()
		}
		out.retrying(last)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-waitCtx.Done():
			t.Stop()
			return nil, giveUp()
		}
	}
}

// giveUp builds the error of a call that ends without the lock: contention
// as ErrNotAcquired, an unreachable store as its own error, each joined with
// the context's error when the caller's context ended the call.
func (c *Client) giveUp(ctx context.Context, req driver.Request, last error) error {
	var err error
	switch {
	case last == nil:
		err = fmt.Errorf("%w: %q: the call ended before the store answered", ErrNotAcquired, req.Resource)
	case errors.Is(last, driver.ErrTaken):
		err = fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, req.Resource)
	default:
		err = last
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// cleanup releases a grant whose outcome is unknown, on a context that
// outlives the caller's.
func (c *Client) cleanup(ctx context.Context, req driver.Request, g driver.Grant) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := c.drv.Release(ctx, req, g); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		c.log.Debug("dlm: cleanup release failed", "store", c.store, "resource", req.Resource, "err", err)
	}
}

// cleanupTimeout bounds releases made on the caller's behalf after its own
// context has ended.
const cleanupTimeout = 5 * time.Second

// newOwner returns 128 random bits in hex: the owner value of one
// acquisition.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

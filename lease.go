package dlm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
)

// Lease is a held lock. It is safe for concurrent use.
//
// A lease ends in one of two ways: Release, or loss. When it is lost, Lost()
// is closed and Err() says why. Its Deadline is the client's conservative
// view of its validity (request start + TTL - drift), never the store's.
type Lease struct {
	c        *Client
	acquired time.Time
	maxHold  time.Duration

	// ended is closed when the lease is released or lost; made only for
	// a grant whose store reports its loss on a channel alone (watch waits
	// on it).
	ended chan struct{}
	// unwatch stops the report of the loss of a grant whose store gives
	// it as a context (LostContext); nil otherwise.
	unwatch     func() bool
	stopRenew   context.CancelFunc // stops the renewer; nil without auto-renew
	renewerDone chan struct{}      // closed when the renewer has returned; nil without auto-renew

	mu       sync.Mutex
	req      driver.Request // Mode changes by Convert
	grant    driver.Grant   // changes by Convert
	deadline time.Time
	// vouched is the latest validity the store's Validator gave for the
	// lease; once it has given one, it bounds the deadline even when the
	// store can no longer tell (the grant lost, the session ended).
	vouched  time.Time
	expiry   *alarm.Alarm
	lost     chan struct{} // made by the first call of Lost
	held     bool          // false once released or lost
	err      error         // why the lease was lost
	holdOver bool          // renewal stopped at the maximum hold
	watching bool          // the grant's WatchBlocking was called
	// releasing: a Release failed without an answer (its context ended,
	// the store did not reply), so the store may have released the lock;
	// a later Release that the store answers "not held" is then done.
	releasing bool
}

// drift is the allowance for clock-rate differences between client and
// store: 1% of the TTL plus 2 ms, as in the Redlock description, unless the
// store says otherwise.
func (c *Client) drift(ttl time.Duration) time.Duration {
	if d, ok := c.drv.(driver.Drifter); ok {
		return d.Drift(ttl)
	}
	return ttl/100 + 2*time.Millisecond
}

func (c *Client) newLease(req driver.Request, g driver.Grant, cfg *config, start time.Time) *Lease {
	if !g.Start.IsZero() {
		start = g.Start
	}
	l := &Lease{
		c:        c,
		req:      req,
		grant:    g,
		acquired: start,
		maxHold:  cfg.maxHold,
		held:     true,
		deadline: start.Add(req.TTL - c.drift(req.TTL)),
	}
	// Every field is set before the timer and the goroutines start: any of
	// them may end the lease at once.
	var renewCtx context.Context
	if cfg.autoRenew {
		renewCtx, l.stopRenew = context.WithCancel(context.Background())
		l.renewerDone = make(chan struct{})
	}
	if g.Lost != nil && g.LostContext == nil {
		l.ended = make(chan struct{})
	}
	l.mu.Lock()
	l.expiry = c.clock.At(l.deadline, l.expire)
	if g.LostContext != nil {
		// No goroutine: the store's context runs storeLost when it ends.
		l.unwatch = context.AfterFunc(g.LostContext, l.storeLost)
	}
	l.mu.Unlock()
	if renewCtx != nil {
		go l.renew(renewCtx)
	}
	if l.ended != nil {
		go l.watch(g.Lost)
	}
	if c.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments cost allocations even when not logged
		c.log.Debug("dlm: acquired", "store", c.store, "resource", req.Resource, "mode", req.Mode, "token", g.Token)
	}
	return l
}

// Resource returns the name of the locked resource.
func (l *Lease) Resource() string { return l.req.Resource }

// Mode returns the lease's lock mode.
func (l *Lease) Mode() Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req.Mode
}

// Token returns the fencing token of the grant (of the last up-conversion,
// after Convert). Pass it to the protected resource, which should refuse any
// token lower than one it has seen.
func (l *Lease) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant.Token
}

// Permits returns the number of semaphore permits held, or 0 for a lock.
func (l *Lease) Permits() int { return l.req.Permits }

// TTL returns the time to live the lock is held and renewed with.
func (l *Lease) TTL() time.Duration { return l.req.TTL }

// Metadata returns the owner description given with WithMetadata (or the
// value last proclaimed, for a Leadership's lease).
func (l *Lease) Metadata() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req.Metadata
}

// Blocking returns a channel that the store closes when another requester
// queues behind this lease in a mode that conflicts with it: someone waits
// for the lease to be released (or converted down). A holder that can
// yield, such as one rebuilding a cache that others could wait for or
// serve stale, watches it to finish early. After Convert, ask again: the
// notice is per mode.
//
// Stores that cannot see their waiters return nil, a channel that never
// fires: the dlm server and the memory store tell at once (see each store
// for its bound), and so do stores that declare driver.FeatureBlocking.
// A store that must watch to tell (etcd) starts its watch at the first
// call, so a holder that never asks costs it nothing.
func (l *Lease) Blocking() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.grant.WatchBlocking; w != nil && !l.watching {
		l.watching = true
		w()
	}
	return l.grant.Blocking
}

// current returns the request and grant as they stand.
func (l *Lease) current() (driver.Request, driver.Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req, l.grant
}

// AcquiredAt returns when the request that was granted was sent.
func (l *Lease) AcquiredAt() time.Time { return l.acquired }

// Deadline returns the end of the lease's validity as the client sees it:
// the start of the last successful acquire or extend request, plus the TTL,
// minus the drift allowance (1% of the TTL + 2 ms). Past it, the lease is
// lost unless it was renewed.
//
// For a store whose locks live by something it keeps alive apart from
// renewals (the dlm server's sessions, see driver.Validator), the deadline
// is that validity when it ends sooner. It never moves later because the
// store stopped vouching for the lock: once the store has said how long
// the lock is valid, a store that can no longer tell (the lock lost, the
// session ended) leaves the deadline at the last validity it gave.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	req, g := l.req, l.grant
	l.mu.Unlock()
	var until time.Time
	if v, ok := l.c.drv.(driver.Validator); ok {
		until = v.ValidUntil(req, g)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.vouched) {
		l.vouched = until
	} else if until.IsZero() {
		until = l.vouched
	}
	if !until.IsZero() && until.Before(l.deadline) {
		return until
	}
	return l.deadline
}

// Lost returns a channel that is closed when the lease is lost. It is never
// closed for a lease that is released while still held.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.err != nil {
			close(l.lost)
		}
	}
	return l.lost
}

// Err returns why the lease was lost, an error matching ErrLost, or nil
// while it is held or after a clean release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Extend resets the lock's time to live to its TTL, if the store still holds
// it for this lease, and moves the deadline accordingly.
//
// It returns an error matching ErrLost when the lease is (or turns out to
// be) lost, ErrNotHeld after Release, and the store's error, such as
// ErrUnavailable, when the store could not answer; the lease then stays
// valid until its deadline.
func (l *Lease) Extend(ctx context.Context) error {
	l.mu.Lock()
	if err := l.usableLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	req, g := l.req, l.grant
	l.mu.Unlock()
	start := time.Now()
	err := l.c.drv.Extend(ctx, req, g)
	l.mu.Lock()
	defer l.mu.Unlock()
	if uerr := l.usableLocked(); uerr != nil {
		return uerr
	}
	switch {
	case err == nil:
		if d := start.Add(l.req.TTL - l.c.drift(l.req.TTL)); d.After(l.deadline) {
			l.deadline = d
			l.expiry.Reset(d)
		}
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		l.loseLocked(fmt.Errorf("%w: the store no longer holds %q for this lease (expired or taken): %w", ErrLost, l.req.Resource, err))
		return l.err
	default:
		return err
	}
}

// Release frees the lock. Releasing twice is not an error. Releasing a lost
// lease returns its loss (matching ErrLost); an owner check that fails in the
// store also matches ErrNotHeld. When the store cannot be reached, or ctx
// ends before it answers, Release returns that error and may be called
// again; the lock otherwise expires at the end of its TTL. A Release called
// again after one that failed so returns nil when the store no longer
// holds the lock: the first one may have freed it; unless the store has
// reported the grant gone meanwhile (a session it could not keep alive),
// when it returns the loss: the lock goes free when the store lets it go,
// not when Release returns.
func (l *Lease) Release(ctx context.Context) (err error) {
	l.mu.Lock()
	if !l.held {
		err = l.err
		l.mu.Unlock()
		return err
	}
	mode, token := l.req.Mode, l.grant.Token
	l.mu.Unlock()
	ctx, end := l.c.tracer.StartRelease(ctx, l.c.store, l.req.Resource, mode, token)
	defer func() { end(err) }()
	if l.stopRenew != nil {
		l.stopRenew()
		<-l.renewerDone
	}
	req, g := l.current()
	err = l.c.drv.Release(ctx, req, g)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, driver.ErrNotHeld) && l.releasing && storeReportsLost(g):
		// Not held after a release that failed, but the store reported
		// the grant gone meanwhile (a session that could not be kept
		// alive, say): the lock goes free when the store lets it go,
		// not now. A lost lease, not a release.
		l.loseLocked(fmt.Errorf("%w: the store reported %q gone while its release had no answer: %w", ErrLost, l.req.Resource, err))
		return l.err
	case err == nil, errors.Is(err, driver.ErrNotHeld) && l.releasing:
		// Released; or not held after a release that failed, which may
		// have freed it (or the TTL did): either way not held, as asked.
		l.c.metrics.Released(l.c.store)
		if l.held {
			l.held = false
			l.expiry.Stop()
			l.unwatchLocked()
		}
		return l.err
	case errors.Is(err, driver.ErrNotHeld):
		l.loseLocked(fmt.Errorf("%w: the store no longer held %q for this lease at release (expired or taken): %w", ErrLost, l.req.Resource, err))
		return l.err
	default:
		l.releasing = true
		return err
	}
}

// storeReportsLost reports whether the store has said that grant g is
// gone (its Lost channel closed), without waiting.
func storeReportsLost(g driver.Grant) bool {
	lost := g.Lost
	if g.LostContext != nil {
		lost = g.LostContext.Done()
	}
	if lost == nil {
		return false
	}
	select {
	case <-lost:
		return true
	default:
		return false
	}
}

// usableLocked returns why the lease can no longer be extended, if so.
func (l *Lease) usableLocked() error {
	switch {
	case l.err != nil:
		return l.err
	case !l.held:
		return fmt.Errorf("%w: the lease of %q was released", ErrNotHeld, l.req.Resource)
	}
	return nil
}

// expire runs when the deadline timer fires. A lease that reaches its
// deadline is lost; the store is then asked, best effort, to release the
// lock, so that stores without a TTL of their own (PostgreSQL) and stores
// whose TTL runs a little longer do not keep it.
func (l *Lease) expire() {
	l.mu.Lock()
	if !l.held {
		l.mu.Unlock()
		return
	}
	if time.Now().Before(l.deadline) { // extended meanwhile
		l.expiry.Reset(l.deadline)
		l.mu.Unlock()
		return
	}
	if l.holdOver {
		l.loseLocked(fmt.Errorf("%w: %q reached its maximum hold of %s", ErrLost, l.req.Resource, l.maxHold))
	} else {
		l.loseLocked(fmt.Errorf("%w: %q was not renewed before its deadline", ErrLost, l.req.Resource))
	}
	req, g := l.req, l.grant
	l.mu.Unlock()
	if l.renewerDone != nil {
		<-l.renewerDone
	}
	l.c.cleanup(context.Background(), req, g)
}

// watch ends the lease as lost when the store reports the grant gone; it
// returns when the lease ends either way.
func (l *Lease) watch(gone <-chan struct{}) {
	select {
	case <-gone:
		l.storeLost()
	case <-l.ended:
	}
}

// unwatchLocked stops watching for the store's report of a loss, the
// lease having ended.
func (l *Lease) unwatchLocked() {
	if l.ended != nil {
		close(l.ended)
	}
	if l.unwatch != nil {
		l.unwatch()
	}
}

// storeLost ends the lease as lost, the store having reported the grant
// gone.
func (l *Lease) storeLost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(fmt.Errorf("%w: the store reports that %q is no longer held for this lease", ErrLost, l.req.Resource))
}

// loseLocked ends a held lease as lost with cause.
func (l *Lease) loseLocked(cause error) {
	if !l.held {
		return
	}
	l.held = false
	l.err = cause
	l.expiry.Stop()
	// Count and log the loss before anyone waiting on Lost wakes, so that
	// what they observe (metrics, logs) already includes it.
	l.c.metrics.Lost(l.c.store)
	l.c.log.Warn("dlm: lock lost", "store", l.c.store, "resource", l.req.Resource, "token", l.grant.Token, "err", cause)
	if l.lost != nil {
		close(l.lost)
	}
	l.unwatchLocked()
	if l.stopRenew != nil {
		l.stopRenew()
	}
}

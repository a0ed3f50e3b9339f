package dlm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ElectionConfig is the loop RunElection runs: a candidate that campaigns,
// works while it leads, and campaigns again when it loses.
type ElectionConfig struct {
	// Election is the election to run. Required.
	Election *Election
	// Value is the candidate's value (such as its address). At most
	// MaxMetadataBytes.
	Value string
	// OnStartedLeading runs the leader's work, each time the candidate is
	// elected. Its context is cancelled the moment the leadership is lost
	// (context.Cause says why, matching ErrLost) or RunElection's context
	// ends, so that the work stops before another candidate can be
	// elected. When it returns while the candidate still leads, the
	// candidate resigns and RunElection returns nil: the work is done.
	// Required.
	OnStartedLeading func(ctx context.Context, l *Leadership)
	// OnStoppedLeading, if not nil, is called each time a leadership ends,
	// after OnStartedLeading has returned.
	OnStoppedLeading func()
	// OnNewLeader, if not nil, is called with each leader the candidate
	// observes (itself included, and the zero Leader when nobody leads),
	// in order, from one goroutine (see Election.Observe).
	OnNewLeader func(Leader)
}

// RunElection runs a candidate until its work is done or ctx ends, in the
// manner of Kubernetes' leader election: it campaigns, runs
// OnStartedLeading while leading, and when the leadership is lost it waits
// for the work to return, calls OnStoppedLeading and campaigns again. When
// ctx ends it stops the work, resigns at once (so the next candidate need
// not wait for a TTL) and returns an error wrapping ctx's.
//
// A store that cannot be reached makes the campaign fail after the
// unavailable timeout; RunElection logs it and campaigns again after a
// pause of the election's retry strategy. It returns at once, with the
// error, for a configuration that can never work (ErrInvalid,
// ErrUnsupported).
func RunElection(ctx context.Context, cfg ElectionConfig) error {
	e := cfg.Election
	switch {
	case e == nil:
		return fmt.Errorf("%w: ElectionConfig.Election is nil", ErrInvalid)
	case cfg.OnStartedLeading == nil:
		return fmt.Errorf("%w: ElectionConfig.OnStartedLeading is nil", ErrInvalid)
	}
	ecfg, err := e.config(cfg.Value)
	if err != nil {
		return err
	}
	if cfg.OnNewLeader != nil {
		octx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for ld := range e.Observe(octx) {
				cfg.OnNewLeader(ld)
			}
		})
		defer wg.Wait()
		defer stop()
	}
	for failures := 0; ; {
		l, err := e.Campaign(ctx, cfg.Value)
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			return fmt.Errorf("dlm: election %q: %w", e.name, ctx.Err())
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrUnsupported):
			return err
		default:
			failures++
			e.c.log.Warn("dlm: campaign failed; trying again", "store", e.c.store, "election", e.name, "err", err)
			pause := ecfg.retry.Backoff(failures)
			if pause < 0 {
				return err
			}
			if !sleep(ctx, pause) {
				return fmt.Errorf("dlm: election %q: %w", e.name, ctx.Err())
			}
			continue
		}
		done := lead(ctx, l, cfg.OnStartedLeading)
		if cfg.OnStoppedLeading != nil {
			cfg.OnStoppedLeading()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("dlm: election %q: %w", e.name, ctx.Err())
		}
		if done {
			return nil
		}
	}
}

// lead runs work while l leads and ends the leadership: it reports whether
// the work returned while still leading (and was resigned), as opposed to
// being stopped by a loss or by ctx.
func lead(ctx context.Context, l *Leadership, work func(context.Context, *Leadership)) bool {
	wctx, stop := whileHeld(ctx, l.lease)
	work(wctx, l)
	stillLeading := wctx.Err() == nil
	stop()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer rcancel()
	if err := l.Resign(rctx); err != nil && !errors.Is(err, ErrLost) {
		l.e.c.log.Warn("dlm: resigning failed; the leadership expires with its TTL", "store", l.e.c.store, "election", l.e.name, "err", err)
	}
	return stillLeading
}

// sleep pauses for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

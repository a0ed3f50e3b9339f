package dlm

import (
	"context"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// Observe returns a channel of the election's leaders: the leader of the
// moment first (the zero Leader when nobody leads), then each change, in
// order, until ctx ends, when the channel is closed. A change is a new
// leader, a new value proclaimed by the leader, or nobody leading any more.
//
// Terms only grow along the channel: a leader is never delivered after one
// with a higher term, nor twice. Observe reads the election whenever the
// store says it changed (driver.Watcher: the dlm server, memory, etcd;
// Redis and PostgreSQL are told by the candidates and also poll, to see a
// leader that vanished without a word), and every WithPollInterval on the
// others, so a leadership shorter than that can be missed, never reordered.
// While the store cannot be reached nothing is delivered, and Observe keeps
// trying, with the election's retry strategy between attempts.
//
// The caller should read the channel until it is closed, or end ctx;
// Observe's goroutine ends with ctx. On a store that cannot read a lock by
// its name (driver.Inspector) the channel is closed at once; Leader says
// why.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	cfg, err := e.config("")
	in, ierr := e.inspector()
	if err != nil || ierr != nil {
		close(ch)
		return ch
	}
	o := &observer{e: e, in: in, poll: cfg.poll, retry: cfg.retry, out: ch}
	o.w, _ = e.c.drv.(driver.Watcher)
	go o.run(ctx)
	return ch
}

// observer is one Observe call's state.
type observer struct {
	e     *Election
	in    driver.Inspector
	w     driver.Watcher // nil: poll
	poll  time.Duration
	retry RetryStrategy
	out   chan<- Leader

	sent    bool   // something was delivered
	last    Leader // what was delivered last
	highest uint64 // the highest term delivered
	fails   int    // consecutive failed reads or watches
}

func (o *observer) run(ctx context.Context) {
	defer close(o.out)
	for ctx.Err() == nil {
		var changed <-chan struct{}
		if o.w != nil {
			wctx, cancel := context.WithCancel(ctx)
			c, err := o.w.Watch(wctx, o.e.name)
			if err != nil {
				cancel()
				o.failed(ctx, "watch", err)
				continue
			}
			changed = c
			o.follow(ctx, changed)
			cancel()
			continue
		}
		o.follow(ctx, nil)
	}
}

// follow reads the election, then again at each signal of changed (or each
// poll interval when changed is nil), until ctx ends or changed closes.
func (o *observer) follow(ctx context.Context, changed <-chan struct{}) {
	for {
		ld, err := o.e.read(ctx, o.in)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			o.failed(ctx, "read", err)
			if changed != nil {
				// Watch again: the store may have been down long enough
				// for the watch to break unnoticed.
				return
			}
			continue
		}
		o.fails = 0
		if !o.deliver(ctx, ld) {
			return
		}
		if changed == nil {
			t := time.NewTimer(o.poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changed:
			if !ok {
				return
			}
		}
	}
}

// deliver sends ld if it is news: a higher term than any delivered, a new
// value of the last leader, or nobody leading after someone did. It
// returns false when ctx ended first.
func (o *observer) deliver(ctx context.Context, ld Leader) bool {
	news := !o.sent ||
		ld.Term > o.highest ||
		(ld.Term != 0 && ld.Term == o.last.Term && ld.Value != o.last.Value) ||
		(ld.Term == 0 && o.last.Term != 0)
	if !news {
		return true
	}
	select {
	case o.out <- ld:
	case <-ctx.Done():
		return false
	}
	o.sent, o.last = true, ld
	o.highest = max(o.highest, ld.Term)
	return true
}

// failed logs a failure and pauses before the next attempt.
func (o *observer) failed(ctx context.Context, what string, err error) {
	o.fails++
	if o.fails == 1 {
		o.e.c.log.Warn("dlm: observing an election failed; retrying", "store", o.e.c.store, "election", o.e.name, "step", what, "err", err)
	}
	pause := o.retry.Backoff(o.fails)
	if pause < 0 {
		pause = o.poll
	}
	t := time.NewTimer(pause)
	select {
	case <-ctx.Done():
		t.Stop()
	case <-t.C:
	}
}

// Package ratelog bounds how often a repeated log line is written: the
// first occurrence of a key is logged at once, later ones at most once per
// interval, each with the number of occurrences suppressed since the last
// line written.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxKeys bounds the keys a Limiter remembers; past it, keys not logged
// within the interval are forgotten.
const maxKeys = 1024

// Limiter rate-limits log lines by key. Its zero value is not usable; make
// one with New. It is safe for concurrent use.
type Limiter struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	last       time.Time // when a line of the key was last written
	suppressed int       // occurrences not written since
}

// New returns a Limiter that writes a key at most once per interval.
func New(interval time.Duration) *Limiter {
	return &Limiter{interval: interval, now: time.Now, keys: map[string]*entry{}}
}

// Allow reports whether an occurrence of key is to be written now, and how
// many occurrences were suppressed since the last one written.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= maxKeys {
			l.forgetLocked(now)
		}
		l.keys[key] = &entry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.interval {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// forgetLocked drops the keys idle for an interval, or all of them if none
// is.
func (l *Limiter) forgetLocked(now time.Time) {
	for k, e := range l.keys {
		if now.Sub(e.last) >= l.interval {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= maxKeys {
		clear(l.keys)
	}
}

// Reset forgets key: its next occurrence is written at once. It returns the
// occurrences suppressed since the last line written.
func (l *Limiter) Reset(key string) (suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.keys[key]; e != nil {
		suppressed = e.suppressed
	}
	delete(l.keys, key)
	return suppressed
}

// Log writes msg with args to log at level if Allow(key) lets it, adding
// "suppressed" with the count of occurrences left out when there were any.
func (l *Limiter) Log(ctx context.Context, log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	ok, n := l.Allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args[:len(args):len(args)], "suppressed", n)
	}
	log.Log(ctx, level, msg, args...)
}

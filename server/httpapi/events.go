package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/auth"
)

// Limits of the live feed, GET /v1/events.
const (
	// MaxEventStreams bounds the feed's streams open at once on a server;
	// more are refused with 503 Service Unavailable and Retry-After.
	MaxEventStreams = 16
	// AdminEventStreams of the MaxEventStreams are kept for identities with
	// the admin permission (and for every caller without authentication):
	// the others together may open at most MaxEventStreams -
	// AdminEventStreams, so that the dashboard of an admin always has room.
	AdminEventStreams = 4
	// DefaultMaxEventStreamsPerIdentity is the default
	// Config.MaxEventStreamsPerIdentity: the streams one
	// authenticated identity may have open at once; more are refused with
	// 429 Too Many Requests.
	DefaultMaxEventStreamsPerIdentity = 4
)

// Pacing of the feed.
const (
	// EventInterval is the shortest gap between two events of a stream, and
	// how often it looks at the applied index: changes applied meanwhile
	// are coalesced into the next snapshot (at most 10 events a second).
	EventInterval = 100 * time.Millisecond
	// EventRefresh is the longest gap: a snapshot is sent at least this
	// often, changed or not, so that times (held for, TTL left) move and
	// membership and leadership, which the applied index does not follow,
	// are refreshed.
	EventRefresh = time.Second
	// eventCostFactor spaces events by at least this many times the time
	// the last snapshot took to build, so that on a large table a stream
	// holds the FSM's read lock at most about 1/eventCostFactor of the time.
	eventCostFactor = 10
	// eventWriteTimeout ends a stream whose client does not take an event
	// within it.
	eventWriteTimeout = 10 * time.Second
	// eventRetry is the reconnection delay suggested to EventSource.
	eventRetry = 2 * time.Second
)

// eventFeed serves GET /v1/events: a stream of Server-Sent Events, each a
// JSON snapshot (a dlmpb.EventSnapshot, on one line: see marshalJSON) of
// the node, its cluster and the part of the lock table whose resource
// names begin with ?prefix=, at most ?limit= resources and sessions
// (default DefaultListLimit, at most MaxListLimit).
// With authentication, only what the caller's list scope covers: the
// resources under its list prefixes, the sessions holding or awaiting
// them, and the members only for an admin.
//
// A stream sends a snapshot at once, then whenever the FSM's applied index
// moved (looked at every EventInterval: changes are coalesced), and at least
// every EventRefresh. It ends when the client goes, the server closes, or
// the client does not take an event within eventWriteTimeout. The watching
// costs nothing to the apply path: the stream reads the applied index, it
// is not told of each command.
//
// Streams are bounded: MaxEventStreams in all, of which AdminEventStreams
// are kept for admins (503 Service Unavailable past them), and
// Config.MaxEventStreamsPerIdentity per authenticated identity (429
// Too Many Requests past it).
type eventFeed struct {
	api         *api
	perIdentity int
	streams     prometheus.Gauge // nil: not counted
	done        <-chan struct{}

	mu         sync.Mutex
	open       int            // streams open
	byIdentity map[string]int // streams open per authenticated identity
}

func newEventFeed(a *api, cfg Config) *eventFeed {
	per := cfg.MaxEventStreamsPerIdentity
	if per <= 0 {
		per = DefaultMaxEventStreamsPerIdentity
	}
	return &eventFeed{api: a, perIdentity: per, streams: cfg.EventStreams, done: cfg.Done, byIdentity: make(map[string]int)}
}

// admit takes a stream slot for p and returns its release, or the HTTP
// status and message of the refusal.
func (f *eventFeed) admit(p auth.Principal) (release func(), code int, msg string) {
	admin := p.IsUnrestricted() || p.MayAny(auth.PermissionAdmin)
	bound := MaxEventStreams
	if !admin {
		bound -= AdminEventStreams
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.byIdentity[p.Identity()]; !p.IsUnrestricted() && n >= f.perIdentity {
		return nil, http.StatusTooManyRequests, fmt.Sprintf("identity %q has %d event streams open, the most one identity may; close one first", p.Identity(), n)
	}
	if f.open >= bound {
		if admin {
			return nil, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams open (%d, the most a server serves); try again later", f.open)
		}
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("too many event streams open (%d of %d; the other %d are kept for admins); try again later", f.open, MaxEventStreams, AdminEventStreams)
	}
	f.open++
	if !p.IsUnrestricted() {
		f.byIdentity[p.Identity()]++
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.open--
		if !p.IsUnrestricted() {
			if f.byIdentity[p.Identity()]--; f.byIdentity[p.Identity()] == 0 {
				delete(f.byIdentity, p.Identity())
			}
		}
	}, 0, ""
}

// ServeHTTP serves one stream of the feed.
func (f *eventFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	limit, err := strconv.Atoi(q.Get("limit"))
	if q.Get("limit") != "" && (err != nil || limit < 0) {
		http.Error(w, "limit: want a non-negative integer", http.StatusBadRequest)
		return
	}
	p := f.api.auth.Caller(r.Context())
	first, err := f.api.svc.Snapshot(p, prefix, limit) // checks the prefix
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	release, code, msg := f.admit(p)
	if release == nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, msg, code)
		return
	}
	defer release()
	if f.streams != nil {
		f.streams.Inc()
		defer f.streams.Dec()
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	f.stream(r.Context(), w, first, func() *dlmpb.EventSnapshot {
		snap, _ := f.api.svc.Snapshot(p, prefix, limit)
		return snap
	}, func() bool { return f.api.auth.Current(p) })
}

// stream writes snapshots to w, first, then each that take returns, until
// ctx ends, the server closes, a write fails or current reports that the
// caller's credentials no longer hold (a login cookie's login ended).
func (f *eventFeed) stream(ctx context.Context, w http.ResponseWriter, first *dlmpb.EventSnapshot, take func() *dlmpb.EventSnapshot, current func() bool) {
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	tick := time.NewTicker(EventInterval)
	defer tick.Stop()
	_, changed := f.api.svc.Leadership()
	var (
		buf   bytes.Buffer
		sent  time.Time // when the last snapshot was taken
		index uint64    // its applied index
		gap   = EventInterval
		force = true
	)
	buf.WriteString("retry: " + strconv.FormatInt(eventRetry.Milliseconds(), 10) + "\n\n")
	for {
		if !current() {
			return
		}
		now := time.Now()
		since := now.Sub(sent)
		if force || since >= max(EventRefresh, gap) || (since >= gap && f.api.svc.Applied() != index) {
			snap := first
			if snap == nil {
				snap = take()
			}
			first = nil
			gap = max(EventInterval, eventCostFactor*time.Since(now))
			data, err := marshalJSON(snap, false) // one line: JSON escapes newlines
			if err != nil {
				f.api.log.Error("dlm server: encode event", "err", err)
				return
			}
			buf.WriteString("event: snapshot\ndata: ")
			buf.Write(data)
			buf.WriteString("\n\n")
			_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout)) // unsupported: no deadline
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			buf.Reset()
			sent, index, force = now, snap.GetStatus().GetAppliedIndex(), false
		}
		select {
		case <-tick.C:
		case <-changed:
			_, changed = f.api.svc.Leadership()
			force = true
		case <-ctx.Done():
			return
		case <-f.done:
			return
		}
	}
}

// ErrBadRequest is wrapped by the Service's errors that are the request's
// fault (HTTP 400).
var ErrBadRequest = errors.New("dlm server: bad request")

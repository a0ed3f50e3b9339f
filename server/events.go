package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/locktable"
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
	// MaxEventQueue bounds the locks a snapshot lists per holder list,
	// conversion queue and wait queue of one resource (their full lengths
	// are given beside them).
	MaxEventQueue = 50
	// MaxEventLocks bounds the locks one snapshot lists in all; the lists
	// of the resources past it are cut short (full lengths still given).
	MaxEventLocks = 5000
)

// Pacing of the feed.
const (
	// eventInterval is the shortest gap between two events of a stream, and
	// how often it looks at the applied index: changes applied meanwhile
	// are coalesced into the next snapshot (at most 10 events a second).
	eventInterval = 100 * time.Millisecond
	// eventRefresh is the longest gap: a snapshot is sent at least this
	// often, changed or not, so that times (held for, TTL left) move and
	// membership and leadership, which the applied index does not follow,
	// are refreshed.
	eventRefresh = time.Second
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
// JSON snapshot (an eventSnapshot) of the node, its cluster and the part of
// the lock table whose resource names begin with ?prefix=, at most ?limit=
// resources and sessions (default DefaultListLimit, at most MaxListLimit).
// With authentication, only what the caller's list scope covers: the
// resources under its list prefixes, the sessions holding or awaiting
// them, and the members only for an admin.
//
// A stream sends a snapshot at once, then whenever the FSM's applied index
// moved (looked at every eventInterval: changes are coalesced), and at least
// every eventRefresh. It ends when the client goes, the server closes, or
// the client does not take an event within eventWriteTimeout. The watching
// costs nothing to the apply path: the stream reads the applied index, it
// is not told of each command.
//
// Streams are bounded: MaxEventStreams in all, of which AdminEventStreams
// are kept for admins (503 Service Unavailable past them), and
// Config.MaxEventStreamsPerIdentity per authenticated identity (429
// Too Many Requests past it).
type eventFeed struct {
	s           *Server
	perIdentity int

	mu         sync.Mutex
	open       int            // streams open
	byIdentity map[string]int // streams open per authenticated identity
}

func newEventFeed(s *Server) *eventFeed {
	return &eventFeed{s: s, perIdentity: s.cfg.MaxEventStreamsPerIdentity, byIdentity: make(map[string]int)}
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

func (f *eventFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if err := validateListArgs(prefix, ""); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(prefix) > f.s.node.Limits().MaxNameLen {
		http.Error(w, "prefix: longer than any resource name", http.StatusBadRequest)
		return
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if q.Get("limit") != "" && (err != nil || limit < 0) {
		http.Error(w, "limit: want a non-negative integer", http.StatusBadRequest)
		return
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)

	p := f.s.auth.Caller(r.Context())
	release, code, msg := f.admit(p)
	if release == nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, msg, code)
		return
	}
	defer release()
	f.s.metrics.eventStreams.Inc()
	defer f.s.metrics.eventStreams.Dec()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	f.s.streamEvents(r.Context(), w, prefix, limit, scopeOf(p), func() bool { return f.s.auth.Current(p) })
}

// streamEvents writes snapshots to w until ctx ends, the server closes, a
// write fails or current reports that the caller's credentials no longer
// hold (a login cookie's login ended).
func (s *Server) streamEvents(ctx context.Context, w http.ResponseWriter, prefix string, limit int, sc listScope, current func() bool) {
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	tick := time.NewTicker(eventInterval)
	defer tick.Stop()
	_, changed := s.node.Leadership()
	var (
		buf   bytes.Buffer
		sent  time.Time // when the last snapshot was taken
		index uint64    // its applied index
		gap   = eventInterval
		force = true
	)
	buf.WriteString("retry: " + strconv.FormatInt(eventRetry.Milliseconds(), 10) + "\n\n")
	for {
		if !current() {
			return
		}
		now := time.Now()
		since := now.Sub(sent)
		if force || since >= max(eventRefresh, gap) || (since >= gap && s.node.FSM().AppliedIndex() != index) {
			snap := s.eventSnapshot(prefix, limit, sc)
			gap = max(eventInterval, eventCostFactor*time.Since(now))
			buf.WriteString("event: snapshot\ndata: ")
			if err := json.NewEncoder(&buf).Encode(snap); err != nil { // one line: JSON escapes newlines
				s.log.Error("dlm server: encode event", "err", err)
				return
			}
			buf.WriteString("\n")
			_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout)) // unsupported: no deadline
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			buf.Reset()
			sent, index, force = now, snap.AppliedIndex, false
		}
		select {
		case <-tick.C:
		case <-changed:
			_, changed = s.node.Leadership()
			force = true
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		}
	}
}

// eventSnapshot is one event of /v1/events.
type eventSnapshot struct {
	NodeID string `json:"node_id"`
	// Ready is true when this node serves requests (see Server.Ready).
	Ready bool `json:"ready"`
	// RaftState is this node's: follower, candidate, leader or shutdown.
	RaftState     string `json:"raft_state"`
	LeaderID      string `json:"leader_id"`
	LeaderAddress string `json:"leader_address"`
	// AppliedIndex is the Raft index of the state shown.
	AppliedIndex uint64    `json:"applied_index"`
	Time         time.Time `json:"time"`
	Prefix       string    `json:"prefix"`
	Limit        int       `json:"limit"`
	// Stats are the whole table's, whatever the prefix.
	Stats   eventStats        `json:"stats"`
	Members []raftnode.Member `json:"members"`
	// MembersHidden is true when the caller may not see the members
	// (they need the admin permission).
	MembersHidden bool `json:"members_hidden,omitempty"`
	// Resources are those whose names begin with Prefix, in name order, at
	// most Limit; MoreResources is true when there are more.
	Resources     []eventResource `json:"resources"`
	MoreResources bool            `json:"more_resources"`
	// Sessions are, without a prefix, the open sessions in id order;
	// with one, the sessions of the locks listed in Resources. At most
	// Limit; MoreSessions is true when there are more.
	Sessions     []eventSession `json:"sessions"`
	MoreSessions bool           `json:"more_sessions"`
}

type eventStats struct {
	Sessions  int    `json:"sessions"`
	Resources int    `json:"resources"`
	Locks     int    `json:"locks"`
	Waiters   int    `json:"waiters"`
	LastToken uint64 `json:"last_token"`
}

type eventResource struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // lock or semaphore
	Capacity uint32 `json:"capacity,omitempty"`
	Used     uint32 `json:"used,omitempty"`
	// Holders in grant order, and the queues head first, each cut at
	// MaxEventQueue (and MaxEventLocks in all); the totals are their full
	// lengths.
	Holders         []eventLock `json:"holders"`
	Converting      []eventLock `json:"converting"`
	Waiting         []eventLock `json:"waiting"`
	HoldersTotal    int         `json:"holders_total"`
	ConvertingTotal int         `json:"converting_total"`
	WaitingTotal    int         `json:"waiting_total"`
}

type eventLock struct {
	ID        uint64 `json:"id"`
	Session   uint64 `json:"session"`
	Owner     uint64 `json:"owner"`
	State     string `json:"state"`
	Mode      string `json:"mode,omitempty"`
	Requested string `json:"requested,omitempty"`
	Permits   uint32 `json:"permits,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Metadata  string `json:"metadata,omitempty"`
	// HeldMillis is the time since the current mode was granted,
	// WaitedMillis since the pending request was queued, DeadlineMillis
	// until it times out; absent when not applicable.
	HeldMillis     *int64 `json:"held_ms,omitempty"`
	WaitedMillis   *int64 `json:"waited_ms,omitempty"`
	DeadlineMillis *int64 `json:"deadline_in_ms,omitempty"`
}

type eventSession struct {
	ID       uint64    `json:"id"`
	Label    string    `json:"label"`
	TTLMilli int64     `json:"ttl_ms"`
	OpenedAt time.Time `json:"opened_at"`
	// ExpiresInMillis is the time left until the session expires without a
	// keepalive; only the serving leader knows it.
	ExpiresInMillis *int64 `json:"expires_in_ms,omitempty"`
	// Held counts its granted locks, Waiting its queued requests and
	// conversions.
	Held    int `json:"held"`
	Waiting int `json:"waiting"`
}

// eventSnapshot takes a snapshot of the node and of the table's resources
// whose names begin with prefix and that sc covers, under one FSM read
// lock.
func (s *Server) eventSnapshot(prefix string, limit int, sc listScope) *eventSnapshot {
	snap := &eventSnapshot{
		NodeID:    s.node.ID(),
		Ready:     s.Ready(),
		RaftState: strings.ToLower(s.node.State().String()),
		Prefix:    prefix,
		Limit:     limit,
		Members:   []raftnode.Member{},
		Resources: []eventResource{},
		Sessions:  []eventSession{},
	}
	snap.LeaderID, snap.LeaderAddress = s.node.Leader()
	if !sc.members {
		snap.MembersHidden = true
	} else if m, err := s.node.Members(); err == nil {
		snap.Members = m
	}
	f := s.node.FSM()
	f.Read(func(v fsm.View) {
		t := v.Table()
		now := time.Now()
		snap.Time = now.UTC()
		snap.AppliedIndex = v.Applied()
		st := t.Stats()
		snap.Stats = eventStats{Sessions: st.Sessions, Resources: st.Resources, Locks: st.Locks, Waiters: st.Pending, LastToken: st.LastToken}

		infos := sc.resources(t, prefix, "", limit+1)
		if len(infos) > limit {
			infos, snap.MoreResources = infos[:limit], true
		}
		budget := MaxEventLocks
		nowNanos := now.UnixNano()
		list := func(ls []locktable.LockInfo) []eventLock {
			n := min(len(ls), MaxEventQueue, budget)
			budget -= n
			out := make([]eventLock, n)
			for i, l := range ls[:n] {
				out[i] = eventLockOf(l, v.Metadata, nowNanos)
			}
			return out
		}
		var involved []locktable.SessionID // with a prefix: the sessions of the locks listed
		for _, r := range infos {
			er := eventResource{
				Name: r.Name, Kind: r.Kind.String(), Capacity: r.Capacity, Used: r.Used,
				Holders: list(r.Holders), Converting: list(r.Converting), Waiting: list(r.Waiting),
				HoldersTotal: len(r.Holders), ConvertingTotal: len(r.Converting), WaitingTotal: len(r.Waiting),
			}
			snap.Resources = append(snap.Resources, er)
			if prefix != "" || !sc.all() {
				for _, ls := range [][]eventLock{er.Holders, er.Waiting} { // converting ones are holders
					for _, l := range ls {
						involved = append(involved, locktable.SessionID(l.Session))
					}
				}
			}
		}

		var sessions []locktable.SessionInfo
		if prefix == "" && sc.all() {
			sessions = t.Sessions(0, limit+1)
		} else {
			slices.Sort(involved)
			involved = slices.Compact(involved)
			for _, id := range involved[:min(len(involved), limit+1)] {
				if si, ok := t.Session(id); ok {
					sessions = append(sessions, si)
				}
			}
		}
		if len(sessions) > limit {
			sessions, snap.MoreSessions = sessions[:limit], true
		}
		for _, si := range sessions {
			es := eventSession{ID: uint64(si.ID), Label: si.Label, OpenedAt: time.Unix(0, si.OpenedAt).UTC()}
			if rec, ok := v.Session(si.ID); ok {
				es.TTLMilli = rec.TTL.Milliseconds()
			}
			if d, ok := s.live.deadline(si.ID); ok {
				es.ExpiresInMillis = millis(d.Sub(now).Nanoseconds())
			}
			for _, l := range sc.locks(si.Locks) {
				switch l.State {
				case locktable.LockGranted:
					es.Held++
				case locktable.LockConverting:
					es.Held++
					es.Waiting++
				case locktable.LockWaiting:
					es.Waiting++
				}
			}
			snap.Sessions = append(snap.Sessions, es)
		}
	})
	return snap
}

// eventLockOf describes lock l as of now (Unix nanoseconds, table time).
func eventLockOf(l locktable.LockInfo, meta metaFunc, now int64) eventLock {
	e := eventLock{
		ID: uint64(l.ID), Session: uint64(l.Session), Owner: uint64(l.Owner), State: l.State.String(),
		Permits: l.Permits, Token: l.Token, Metadata: string(meta(l.ID)),
	}
	if l.Mode.Valid() {
		e.Mode = l.Mode.String()
	}
	if l.Requested.Valid() {
		e.Requested = l.Requested.String()
	}
	if l.State != locktable.LockWaiting {
		e.HeldMillis = millis(now - l.GrantedAt)
	}
	if l.State != locktable.LockGranted {
		e.WaitedMillis = millis(now - l.QueuedAt)
		if l.Deadline != 0 {
			e.DeadlineMillis = millis(l.Deadline - now)
		}
	}
	return e
}

// millis converts nanoseconds to milliseconds, never below zero (the
// leader's stamps may be ahead of this node's clock).
func millis(nanos int64) *int64 {
	v := max(nanos, 0) / int64(time.Millisecond)
	return &v
}

package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/protocol"
)

// Bounds of Watch.
const (
	// DefaultMaxWatches is the default Config.MaxWatches: the watches a
	// server serves at once. Each costs a goroutine and a stream, some
	// tens of KiB.
	DefaultMaxWatches = 4096
	// DefaultMaxWatchesPerIdentity is the default
	// Config.MaxWatchesPerIdentity: the watches one authenticated identity
	// may have open at once on a server. Without authentication it does not
	// apply.
	DefaultMaxWatchesPerIdentity = 512
)

// Watch serves one watch of a resource: see dlmpb.DLMServer. The leader
// wakes the watch as it applies a command that changes the resource (the
// FSM's observer, applied, calls watches.changed, which never blocks: a
// wake that finds one pending is dropped, so a slow watcher coalesces),
// and the watch then reads the resource and sends it. At most one event
// is on its way per watch: the next is read once the last is sent.
func (s *Server) Watch(req *dlmpb.WatchRequest, stream dlmpb.DLM_WatchServer) error {
	ctx := stream.Context()
	p := s.auth.Caller(ctx)
	if !p.Authenticated() {
		return status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	name := req.GetResource()
	var maxLen int
	s.node.FSM().Read(func(v fsm.View) { maxLen = v.Table().Limits().MaxNameLen })
	if err := protocol.ValidateWatch(req, maxLen); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !p.May(auth.PermissionList, name) {
		s.auth.Deny(p, auth.PermissionList, name)
		return permissionDenied(fmt.Sprintf("identity %s may not list %q", p.Identity(), name))
	}
	w, err := s.watches.add(name, p)
	if errors.Is(err, errNotLeader) {
		return s.notLeader(stream)
	}
	if err != nil {
		return err
	}
	defer s.watches.remove(w)
	for {
		select {
		case <-w.ended:
			return s.watchEnd(stream, w)
		default:
		}
		if err := stream.Send(s.watchEvent(name)); err != nil {
			return err
		}
		select {
		case <-w.wake:
		case <-w.ended:
			return s.watchEnd(stream, w)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchEnd is the status of a watch that ended: as the other calls refuse
// on a node that does not lead, naming the leader if it knows one.
func (s *Server) watchEnd(stream dlmpb.DLM_WatchServer, w *watcher) error {
	if errors.Is(w.reason(), errNotLeader) {
		return s.notLeader(stream)
	}
	return endStatus(w.reason())
}

// watchEvent reads resource name as a watch shows it.
func (s *Server) watchEvent(name string) *dlmpb.WatchEvent {
	ev := &dlmpb.WatchEvent{}
	s.node.FSM().Read(func(v fsm.View) {
		ev.Index = v.Applied()
		page, _ := v.Table().ResourcePage(locktable.ResourceQuery{Prefix: name, Exact: true, MaxResources: 1, MaxLocks: MaxListLocks})
		if len(page) == 0 {
			ev.Resource = &dlmpb.ResourceInfo{Name: name}
			return
		}
		ev.Resource = protocol.ResourceInfo(page[0], s.source(v, time.Now(), false))
	})
	return ev
}

// watches are the watches open on the server, by resource.
type watches struct {
	max, perIdentity int
	active           func() bool // the node serves as leader
	open             atomic.Int64

	mu         sync.Mutex
	byName     map[string]map[*watcher]struct{}
	byIdentity map[string]int // watches per authenticated identity
	closed     bool
}

// watcher is one watch.
type watcher struct {
	name     string
	identity string        // "" without authentication: not counted per identity
	wake     chan struct{} // capacity 1: a change was applied since the last read
	ended    chan struct{} // closed when the watch must end, with why
	why      error
}

func newWatches(max, perIdentity int, active func() bool) *watches {
	return &watches{max: max, perIdentity: perIdentity, active: active,
		byName: make(map[string]map[*watcher]struct{}), byIdentity: make(map[string]int)}
}

// add registers a watch of name for p, unless the node does not lead
// (errNotLeader) or a bound refuses it (a ResourceExhausted status).
func (ws *watches) add(name string, p auth.Principal) (*watcher, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.closed:
		return nil, status.Error(codes.Unavailable, errShutdown.Error())
	case !ws.active():
		return nil, errNotLeader
	case int(ws.open.Load()) >= ws.max:
		return nil, status.Errorf(codes.ResourceExhausted, "dlm server: %d watches open, the most this server serves; try again later", ws.open.Load())
	}
	id := ""
	if !p.IsUnrestricted() {
		id = p.Identity()
		if n := ws.byIdentity[id]; n >= ws.perIdentity {
			return nil, status.Errorf(codes.ResourceExhausted, "dlm server: identity %q has %d watches open, the most one identity may; end one first", id, n)
		}
		ws.byIdentity[id]++
	}
	w := &watcher{name: name, identity: id, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	set := ws.byName[name]
	if set == nil {
		set = make(map[*watcher]struct{})
		ws.byName[name] = set
	}
	set[w] = struct{}{}
	ws.open.Add(1)
	return w, nil
}

// remove unregisters w.
func (ws *watches) remove(w *watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	set := ws.byName[w.name]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(ws.byName, w.name)
	}
	if w.identity != "" {
		if ws.byIdentity[w.identity]--; ws.byIdentity[w.identity] <= 0 {
			delete(ws.byIdentity, w.identity)
		}
	}
	ws.open.Add(-1)
}

// changed wakes the watches of the resources command result r changed. It
// runs on the apply path and never blocks.
func (ws *watches) changed(r *fsm.Result) {
	if ws.open.Load() == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if r.Resource != "" {
		ws.wakeLocked(r.Resource)
	}
	for i := range r.Events {
		// A blocking notice changes nothing: the request it tells of
		// queued in the same command.
		if e := &r.Events[i]; e.Resource != "" && e.Kind != locktable.EventBlocking {
			ws.wakeLocked(e.Resource)
		}
	}
}

// wakeLocked wakes the watches of name.
func (ws *watches) wakeLocked(name string) {
	for w := range ws.byName[name] {
		select {
		case w.wake <- struct{}{}:
		default: // one is pending: it covers this change too
		}
	}
}

// endAll ends every watch with why (the node stops leading); with
// shutdown, none is taken after.
func (ws *watches) endAll(why error, shutdown bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = ws.closed || shutdown
	for _, set := range ws.byName {
		for w := range set {
			if w.why == nil {
				w.why = why
				close(w.ended)
			}
		}
	}
}

// reason returns why the watch ended; call it once ended is closed.
func (w *watcher) reason() error { return w.why }

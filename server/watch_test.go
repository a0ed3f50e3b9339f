package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/raftnode"
)

// watchStream is a Watch stream read by hand.
type watchStream struct {
	t      *testing.T
	stream dlmpb.DLM_WatchClient
	cancel context.CancelFunc
	index  uint64 // of the last event
}

// watch opens a watch of name on c and reads its first event.
func watch(t *testing.T, c dlmpb.DLMClient, ctx context.Context, name string) (*watchStream, *dlmpb.WatchEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	t.Cleanup(cancel)
	st, err := c.Watch(ctx, &dlmpb.WatchRequest{Resource: name})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchStream{t: t, stream: st, cancel: cancel}
	return w, w.next(func(*dlmpb.WatchEvent) bool { return true })
}

// next reads events until one satisfies want, checking that their indexes
// grow and that each shows its resource.
func (w *watchStream) next(want func(*dlmpb.WatchEvent) bool) *dlmpb.WatchEvent {
	w.t.Helper()
	for {
		ev, err := w.stream.Recv()
		if err != nil {
			w.t.Fatalf("watch: %v", err)
		}
		if ev.GetIndex() < w.index || ev.GetResource() == nil {
			w.t.Fatalf("event %v after index %d", ev, w.index)
		}
		w.index = ev.GetIndex()
		if want(ev) {
			return ev
		}
	}
}

// holders returns the sessions and metadata of an event's holders and the
// sessions of its waiters, as text.
func holders(ev *dlmpb.WatchEvent) string {
	r := ev.GetResource()
	s := "holders"
	for _, h := range r.GetHolders() {
		s += fmt.Sprintf(" %d:%q", h.GetSession(), h.GetMetadata())
	}
	s += " waiting"
	for _, l := range r.GetWaiting() {
		s += fmt.Sprintf(" %d", l.GetSession())
	}
	return s
}

// showing matches an event whose holders and waiters read want.
func showing(want string) func(*dlmpb.WatchEvent) bool {
	return func(ev *dlmpb.WatchEvent) bool { return holders(ev) == want }
}

// A watch sees every change of its resource, in order: a grant, a
// relabel, a request that queues, a release that hands the lock over, and
// the end of the holder's session (expired by the leader). Another resource's changes are not
// its.
func TestWatch(t *testing.T) {
	s := startServer(t, Config{})
	c := dialPB(t, s.Addr())
	w, first := watch(t, c, context.Background(), "w")
	if r := first.GetResource(); r.GetName() != "w" || len(r.GetHolders()) != 0 || first.GetIndex() == 0 {
		t.Fatalf("first event %v, want the free resource w", first)
	}

	a, _ := open(t, s, 0, 10*time.Second)
	b, _ := open(t, s, 0, 10*time.Second)
	a.granted(a.lock("other", dlmpb.Mode_MODE_EX))
	lock := a.granted(a.lock("w", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte("v1") })).GetLockId()
	if ev := w.next(func(*dlmpb.WatchEvent) bool { return true }); holders(ev) != fmt.Sprintf("holders %d:%q waiting", a.sid, "v1") {
		t.Fatalf("after the grant: %s (the change of another resource was sent?)", holders(ev))
	}
	a.relabel(lock, []byte("v2"))
	w.next(showing(fmt.Sprintf("holders %d:%q waiting", a.sid, "v2")))
	b.lock("w", dlmpb.Mode_MODE_EX)
	w.next(showing(fmt.Sprintf("holders %d:%q waiting %d", a.sid, "v2", b.sid)))
	a.release(lock)
	w.next(showing(fmt.Sprintf("holders %d:%q waiting", b.sid, "")))
	// The end of b's session, as the leader expires it.
	if _, err := c.KillSessions(context.Background(), &dlmpb.KillSessionsRequest{Sessions: []uint64{b.sid}}); err != nil {
		t.Fatal(err)
	}
	w.next(showing("holders waiting"))
	if s.watches.open.Load() != 1 {
		t.Fatalf("%d watches registered, want 1", s.watches.open.Load())
	}
	w.cancel()
	waitFor(t, context.Background(), "the watch unregistered", func() bool { return s.watches.open.Load() == 0 })
}

// A watch that is not read never holds up the apply path: the changes
// go on, and once read the watch shows the resource as it is now.
func TestWatchSlowReader(t *testing.T) {
	s := startServer(t, Config{})
	w, _ := watch(t, dialPB(t, s.Addr()), context.Background(), "busy")
	r, _ := open(t, s, 0, 10*time.Second)
	const rounds = 50
	for i := range rounds {
		lock := r.granted(r.lock("busy", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte(fmt.Sprint(i)) })).GetLockId()
		if i < rounds-1 {
			r.release(lock)
			if r.recvSkipAcks().GetReleased() == nil {
				t.Fatal("no Released")
			}
		}
	}
	w.next(showing(fmt.Sprintf("holders %d:%q waiting", r.sid, fmt.Sprint(rounds-1))))
}

// The apply path's wake never blocks: a watcher that does not take its
// wakes has one pending, whatever the changes.
func TestWatchWakesCoalesce(t *testing.T) {
	ws := newWatches(10, 10, func() bool { return true })
	w, err := ws.add("x", auth.Unrestricted())
	if err != nil {
		t.Fatal(err)
	}
	other, err := ws.add("y", auth.Unrestricted())
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		ws.changed(&fsm.Result{Events: []locktable.Event{{Kind: locktable.EventReleased, Resource: "x"}}})
	}
	ws.changed(&fsm.Result{Resource: "x"})
	ws.changed(&fsm.Result{Events: []locktable.Event{{Kind: locktable.EventBlocking, Resource: "y"}}})
	if len(w.wake) != 1 || len(other.wake) != 0 {
		t.Fatalf("wakes pending: %d for x (want 1), %d for y (want 0: a blocking notice changes nothing)", len(w.wake), len(other.wake))
	}
	ws.remove(w)
	ws.remove(w)
	ws.remove(other)
	if n := ws.open.Load(); n != 0 || len(ws.byName) != 0 {
		t.Fatalf("%d watches open after their removal (%v)", n, ws.byName)
	}
}

// Watches are bounded per server and per authenticated identity; past a
// bound they are refused with ResourceExhausted, and a watch that ends
// gives its place back. A node that stops leading ends its watches; one
// that does not lead, or shuts down, takes none.
func TestWatchBounds(t *testing.T) {
	active := true
	ws := newWatches(3, 2, func() bool { return active })
	rules, err := auth.ParseRules(strings.NewReader("alice list *\nbob list *\n"))
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := auth.NewPrincipal("alice", rules), auth.NewPrincipal("bob", rules)
	a1, err1 := ws.add("x", alice)
	_, err2 := ws.add("y", alice)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	_, err = ws.add("z", alice)
	wantCode(t, err, codes.ResourceExhausted, "alice's third watch")
	if !strings.Contains(err.Error(), `identity "alice" has 2 watches open`) {
		t.Fatalf("refusal %v does not say what bound", err)
	}
	if _, err := ws.add("z", bob); err != nil {
		t.Fatal(err)
	}
	_, err = ws.add("z", auth.Unrestricted())
	wantCode(t, err, codes.ResourceExhausted, "a fourth watch")
	if !strings.Contains(err.Error(), "3 watches open, the most this server serves") {
		t.Fatalf("refusal %v does not say what bound", err)
	}
	ws.remove(a1)
	if _, err := ws.add("z", alice); err != nil {
		t.Fatalf("after one ended: %v", err)
	}

	ws.endAll(errNotLeader, false)
	for _, set := range ws.byName {
		for w := range set {
			select {
			case <-w.ended:
			default:
				t.Fatal("a watch survived the end of leadership")
			}
			if !errors.Is(w.reason(), errNotLeader) {
				t.Fatalf("ended with %v", w.reason())
			}
		}
	}
	active = false
	if _, err := ws.add("x", bob); !errors.Is(err, errNotLeader) {
		t.Fatalf("a watch on a node that does not lead: %v", err)
	}
	active = true
	ws.endAll(errShutdown, true)
	_, err = ws.add("x", bob)
	wantCode(t, err, codes.Unavailable, "a watch on a node shutting down")
}

// Through the service: a second watch past MaxWatches is refused; with
// authentication, a watch needs the list permission on its resource.
func TestWatchRefusals(t *testing.T) {
	as := startAuthServer(t, Config{MaxWatches: 1})
	alice := dialGRPC(t, as.Addr(), nil)
	ctx := bearer(context.Background(), as.tok["alice"])
	watch(t, alice, ctx, "a/1")
	st, err := alice.Watch(ctx, &dlmpb.WatchRequest{Resource: "a/2"})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.ResourceExhausted, "a watch past MaxWatches")

	for name, want := range map[string]codes.Code{"b/1": codes.PermissionDenied, "": codes.InvalidArgument} {
		st, err := alice.Watch(ctx, &dlmpb.WatchRequest{Resource: name})
		if err == nil {
			_, err = st.Recv()
		}
		wantCode(t, err, want, fmt.Sprintf("alice watching %q", name))
	}
	st, err = alice.Watch(bearer(context.Background(), as.tok["carol"]), &dlmpb.WatchRequest{Resource: "a/1"})
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.PermissionDenied, "carol, who may list nothing")
}

// A node that does not lead refuses a watch as it refuses a session,
// naming the leader it knows (none here) in the trailer.
func TestWatchRefusedOffLeader(t *testing.T) {
	s, err := Start(Config{Node: raftnode.Config{ID: "lone", InMemory: true, Join: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var trailer metadata.MD
	st, err := dialPB(t, s.Addr()).Watch(context.Background(), &dlmpb.WatchRequest{Resource: "x"}, grpc.Trailer(&trailer))
	if err == nil {
		_, err = st.Recv()
	}
	wantCode(t, err, codes.Unavailable, "a watch on a node that does not lead")
	if _, ok := trailer[cluster.LeaderHeader]; !ok {
		t.Fatalf("trailer %v has no %s", trailer, cluster.LeaderHeader)
	}
}

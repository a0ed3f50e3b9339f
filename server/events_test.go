package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/httpapi"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// feed is a client of /v1/events: its snapshots arrive on c, which is
// closed when the stream ends.
type feed struct {
	t      *testing.T
	c      chan *dlmpb.EventSnapshot
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has returned
}

// openFeed opens /v1/events with the given query and checks the response.
func openFeed(t *testing.T, s *Server, query string) *feed {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp := getEvents(t, ctx, s, query)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("/v1/events?%s: %d %s", query, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	f := &feed{t: t, c: make(chan *dlmpb.EventSnapshot, 64), cancel: cancel, done: make(chan struct{})}
	go f.read(resp.Body)
	return f
}

func getEvents(t *testing.T, ctx context.Context, s *Server, query string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr()+"/v1/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// read parses the event stream: "event: snapshot" and one "data:" line per
// event, a blank line after each.
func (f *feed) read(body io.ReadCloser) {
	defer close(f.done)
	defer close(f.c)
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "snapshot" {
				snap := new(dlmpb.EventSnapshot)
				if err := protojson.Unmarshal([]byte(data), snap); err != nil {
					f.t.Errorf("event data: %v\n%s", err, data)
					return
				}
				f.c <- snap
			}
			event, data = "", ""
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// next returns the next snapshot. One comes at least every httpapi.EventRefresh;
// the wait for it allows a loaded machine ten times that.
func (f *feed) next() *dlmpb.EventSnapshot {
	f.t.Helper()
	select {
	case snap, ok := <-f.c:
		if !ok {
			f.t.Fatal("event stream ended")
		}
		return snap
	case <-time.After(10 * httpapi.EventRefresh):
		f.t.Fatalf("no event within %s", 10*httpapi.EventRefresh)
	}
	return nil
}

// await returns the first snapshot that satisfies ok, within 20s.
func (f *feed) await(what string, ok func(*dlmpb.EventSnapshot) bool) *dlmpb.EventSnapshot {
	f.t.Helper()
	deadline := time.After(20 * time.Second)
	var last *dlmpb.EventSnapshot
	for {
		select {
		case snap, open := <-f.c:
			if !open {
				f.t.Fatalf("event stream ended before %s", what)
			}
			if ok(snap) {
				return snap
			}
			last = snap
		case <-deadline:
			b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(last)
			f.t.Fatalf("no event with %s within 20s; last:\n%s", what, b)
		}
	}
}

// resourceOf returns resource name of snapshot s, nil if it has none.
func resourceOf(s *dlmpb.EventSnapshot, name string) *dlmpb.ResourceInfo {
	for _, r := range s.GetResources() {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

// sessionOf returns session id of snapshot s, nil if it has none.
func sessionOf(s *dlmpb.EventSnapshot, id uint64) *dlmpb.SessionInfo {
	for _, x := range s.GetSessions() {
		if x.GetId() == id {
			return x
		}
	}
	return nil
}

func sessionsOf(ls []*dlmpb.LockInfo) []uint64 {
	out := []uint64{}
	for _, l := range ls {
		out = append(out, l.GetSession())
	}
	return out
}

func TestEventsFollowTheTable(t *testing.T) {
	s := startServer(t, Config{})
	f := openFeed(t, s, "")

	first := f.next()
	if st := first.GetStatus(); st.GetNodeId() != "node-1" || !st.GetReady() || st.GetRaftState() != "leader" || st.GetLeaderId() != "node-1" ||
		len(first.Resources) != 0 || first.GetLimit() != DefaultListLimit {
		t.Fatalf("first snapshot: %+v", first)
	}
	if len(first.Members) != 1 {
		t.Fatalf("members of a single node: %+v", first.Members)
	}
	if m := first.Members[0]; m.GetId() != "node-1" || m.GetAddress() != s.Node().Addr() || m.GetSuffrage() != "voter" || !m.GetLeader() || !m.GetSelf() {
		t.Fatalf("member: %+v", m)
	}

	// An acquisition shows up, then a waiter, then the hand-over. The
	// sessions send no keepalives: their TTL outlasts the test.
	const ttl = time.Minute
	a, _ := open(t, s, 0, ttl)
	b, _ := open(t, s, 0, ttl)
	ga := a.granted(a.lock("orders/42", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte("worker <3>") }))
	snap := f.await("orders/42 held by a", func(s *dlmpb.EventSnapshot) bool {
		r := resourceOf(s, "orders/42")
		return r != nil && len(r.Holders) == 1 && r.Holders[0].GetSession() == a.sid
	})
	h := resourceOf(snap, "orders/42").Holders[0]
	if h.GetMode() != dlmpb.Mode_MODE_EX || h.GetToken() != ga.GetToken() || h.GetMetadata() != "worker <3>" || h.GetGrantedAt() == nil || h.GetState() != dlmpb.LockInfo_STATE_GRANTED {
		t.Fatalf("holder: %v", h)
	}
	if st := snap.GetStatus(); st.GetAppliedIndex() <= first.GetStatus().GetAppliedIndex() || st.GetSessions() != 2 || st.GetResources() != 1 {
		t.Fatalf("snapshot: index %d after %d, status %v", st.GetAppliedIndex(), first.GetStatus().GetAppliedIndex(), st)
	}
	sa := sessionOf(snap, a.sid)
	if sa == nil || sa.GetLabel() != t.Name() || sa.GetTtl().AsDuration() != ttl || sa.GetExpiresIn() == nil || sa.GetExpiresIn().AsDuration() > ttl || sa.GetHeld() != 1 {
		t.Fatalf("session a: %v", sa)
	}

	b.lock("orders/42", dlmpb.Mode_MODE_PR, func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(time.Minute) })
	snap = f.await("b waiting", func(s *dlmpb.EventSnapshot) bool {
		r := resourceOf(s, "orders/42")
		return r != nil && slices.Equal(sessionsOf(r.Waiting), []uint64{b.sid})
	})
	w := resourceOf(snap, "orders/42").Waiting[0]
	if w.GetRequested() != dlmpb.Mode_MODE_PR || w.GetState() != dlmpb.LockInfo_STATE_WAITING || w.GetQueuedAt() == nil || w.GetDeadline() == nil || w.GetGrantedAt() != nil {
		t.Fatalf("waiter: %v", w)
	}
	if sb := sessionOf(snap, b.sid); sb == nil || sb.GetWaiting() != 1 || sb.GetHeld() != 0 {
		t.Fatalf("session b: %v", sb)
	}

	a.release(ga.GetLockId())
	f.await("b holding", func(s *dlmpb.EventSnapshot) bool {
		r := resourceOf(s, "orders/42")
		return r != nil && slices.Equal(sessionsOf(r.Holders), []uint64{b.sid}) && len(r.Waiting) == 0
	})
}

// Events come at most every httpapi.EventInterval however fast the table changes,
// and at least every httpapi.EventRefresh when it does not. The spacing is checked
// over the whole churn, not gap by gap: a snapshot's time is taken a moment
// after the stream decides to send it, a moment that a loaded machine can
// stretch; the gaps are logged.
func TestEventsAreCoalescedAndRefreshed(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute) // no keepalives: it must outlive the test
	opened := time.Now()
	f := openFeed(t, s, "")
	f.next()

	// Many entries a second for a while; the feed's reader buffers the
	// events meanwhile.
	const churn = 50 * httpapi.EventInterval
	entries := 0
	for end := time.Now().Add(churn); time.Now().Before(end); entries += 2 {
		g := a.granted(a.lock("churn", dlmpb.Mode_MODE_EX))
		a.release(g.GetLockId())
		a.recvSkipAcks() // Released
	}
	var times []time.Time
	for len(f.c) > 0 {
		times = append(times, f.next().GetStatus().GetNow().AsTime())
	}
	elapsed := time.Since(opened)
	gaps := make([]time.Duration, 0, len(times))
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	t.Logf("%d events for %d entries in %v; gaps %v", len(times), entries, elapsed, gaps)
	// Each event is sent at least httpapi.EventInterval after the one before, the
	// first one read included (sent after the feed was opened): no more of
	// them fit in the time since.
	if max := int(elapsed / httpapi.EventInterval); len(times) > max {
		t.Fatalf("%d events in %v after the first, at most %d fit one per %v: changes not coalesced", len(times), elapsed, max, httpapi.EventInterval)
	}
	// Changes are reported as they come, not at the refresh only, which
	// would send one event per httpapi.EventRefresh. (Not one per httpapi.EventInterval
	// either: the stream spaces events by ten times the time a snapshot
	// takes to build, which a loaded machine stretches.)
	if refreshOnly := int(elapsed/httpapi.EventRefresh) + 1; len(times) < refreshOnly+2 {
		t.Fatalf("%d events for %d entries in %v, want more than the %d that the refresh alone sends", len(times), entries, elapsed, refreshOnly)
	}
	for i, gap := range gaps {
		if gap <= 0 {
			t.Fatalf("event %d is %v after the one before", i+1, gap)
		}
	}

	// Quiet: the refresh still comes (next waits up to 10 httpapi.EventRefresh for
	// it), and not before its time (and the TTL left moves).
	if err := s.Node().Settle(t.Context()); err != nil { // every request taken
		t.Fatal(err)
	}
	applied := s.Node().FSM().AppliedIndex()
	s1 := f.await("the last entry", func(s *dlmpb.EventSnapshot) bool { return s.GetStatus().GetAppliedIndex() == applied })
	s2 := f.next()
	gap := s2.GetStatus().GetNow().AsTime().Sub(s1.GetStatus().GetNow().AsTime())
	t.Logf("quiet refresh after %v (httpapi.EventRefresh %v)", gap, httpapi.EventRefresh)
	if gap < httpapi.EventRefresh/2 {
		t.Fatalf("quiet refresh after %v, want about %v", gap, httpapi.EventRefresh)
	}
	if s1.GetStatus().GetAppliedIndex() != s2.GetStatus().GetAppliedIndex() {
		t.Fatalf("applied index moved while quiet: %d then %d", s1.GetStatus().GetAppliedIndex(), s2.GetStatus().GetAppliedIndex())
	}
	e1, e2 := sessionOf(s1, a.sid).GetExpiresIn(), sessionOf(s2, a.sid).GetExpiresIn()
	if e1 == nil || e2 == nil || e2.AsDuration() >= e1.AsDuration() {
		t.Fatalf("TTL left does not move: %v then %v", e1, e2)
	}
}

func TestEventsPrefixAndLimit(t *testing.T) {
	s := startServer(t, Config{})
	// No keepalives: the sessions' TTL outlasts the test.
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	c, _ := open(t, s, 0, time.Minute)
	a.granted(a.lock("jobs/1", dlmpb.Mode_MODE_EX))
	b.granted(b.lock("jobs/2", dlmpb.Mode_MODE_EX))
	c.granted(c.lock("other/1", dlmpb.Mode_MODE_EX))

	snap := openFeed(t, s, "prefix="+url.QueryEscape("jobs/")).next()
	var names []string
	for _, r := range snap.Resources {
		names = append(names, r.GetName())
	}
	if !slices.Equal(names, []string{"jobs/1", "jobs/2"}) || snap.MoreResources || snap.Prefix != "jobs/" {
		t.Fatalf("prefix jobs/: resources %q (more %v, prefix %q)", names, snap.MoreResources, snap.Prefix)
	}
	var sids []uint64
	for _, x := range snap.Sessions {
		sids = append(sids, x.GetId())
	}
	if !slices.Equal(sids, []uint64{a.sid, b.sid}) {
		t.Fatalf("prefix jobs/: sessions %v, want those of jobs/ (%d, %d)", sids, a.sid, b.sid)
	}
	if st := snap.GetStatus(); st.GetResources() != 3 || st.GetSessions() != 3 {
		t.Fatalf("the status is the whole table's: %v", st)
	}

	snap = openFeed(t, s, "limit=1").next()
	if len(snap.Resources) != 1 || snap.Resources[0].GetName() != "jobs/1" || !snap.GetMoreResources() ||
		len(snap.Sessions) != 1 || !snap.GetMoreSessions() || snap.GetLimit() != 1 {
		t.Fatalf("limit=1: %v", snap)
	}
	if snap := openFeed(t, s, "prefix=nothing/").next(); len(snap.Resources) != 0 || len(snap.Sessions) != 0 {
		t.Fatalf("prefix nothing/: %v", snap)
	}

	for _, q := range []string{"limit=-1", "limit=x", "prefix=" + strings.Repeat("p", raftnode.DefaultMaxNameLen+1)} {
		resp := getEvents(t, t.Context(), s, q)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s: %d, want 400", q[:min(len(q), 20)], resp.StatusCode)
		}
	}
}

// streamGoroutines counts the goroutines serving an event stream.
func streamGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "httpapi.(*eventFeed).stream(")
}

// waitStreams waits until n streams are served, by the metric and by the
// goroutines.
func waitStreams(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, m := streamGoroutines(), int(testutil.ToFloat64(s.metrics.eventStreams))
		if g == n && m == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stream goroutines and dlm_server_event_streams %d, want %d", g, m, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventsStreamEndsWhenTheClientGoes(t *testing.T) {
	s := startServer(t, Config{})
	f := openFeed(t, s, "")
	f.next()
	waitStreams(t, s, 1)
	f.cancel()
	<-f.done
	waitStreams(t, s, 0)
}

func TestEventsStreamsAreBounded(t *testing.T) {
	s := startServer(t, Config{})
	feeds := make([]*feed, httpapi.MaxEventStreams)
	for i := range feeds {
		feeds[i] = openFeed(t, s, "")
		feeds[i].next()
	}
	resp := getEvents(t, t.Context(), s, "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("stream %d: %d (Retry-After %q), want 503 with Retry-After", httpapi.MaxEventStreams+1, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	feeds[0].cancel()
	<-feeds[0].done
	waitStreams(t, s, httpapi.MaxEventStreams-1)
	openFeed(t, s, "").next()
}

// Close ends the streams, and their goroutines, at once.
func TestEventsEndWhenTheServerCloses(t *testing.T) {
	s, err := Start(Config{Node: raftnode.Config{InMemory: true, Raft: servertest.FastRaft}, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	f := openFeed(t, s, "")
	f.next()
	start := time.Now()
	// Close gives the HTTP server's shutdown 2s to see every connection
	// idle, and fails if a stream keeps its connection busy past that: an
	// error, not a time, tells that the stream ended at once.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v with a stream open", time.Since(start))
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after Close")
	}
	if n := streamGoroutines(); n != 0 {
		t.Fatalf("%d stream goroutines after Close", n)
	}
	servertest.CheckNoLeaks(t)
}

func TestDashboardAndMembers(t *testing.T) {
	s := startServer(t, Config{})
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/")
	if resp.StatusCode != 200 || !strings.Contains(body, "<title>dlm dashboard</title>") ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("/: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	if resp, body := get("/app.js"); resp.StatusCode != 200 || !strings.Contains(body, "v1/events") {
		t.Fatalf("/app.js: %d", resp.StatusCode)
	}
	if resp, _ := get("/no-such-file"); resp.StatusCode != 404 {
		t.Fatalf("/no-such-file: %d, want 404", resp.StatusCode)
	}
	resp, body = get("/v1/members")
	var m dlmpb.MemberList
	if err := protojson.Unmarshal([]byte(body), &m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/members: %d %v\n%s", resp.StatusCode, err, body)
	}
	if m.GetLeaderId() != "node-1" || len(m.GetMembers()) != 1 || !m.GetMembers()[0].GetLeader() || !m.GetMembers()[0].GetSelf() {
		t.Fatalf("/v1/members:\n%s", body)
	}
}

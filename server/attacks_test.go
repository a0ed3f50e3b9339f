package server

// The attacks of issue 17, each driven the way the attacker did (raw gRPC
// messages through api/dlmpb, raw HTTP), each failing on the code before
// its fix.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// --- Issue 17, item 5: per-identity quotas; admin listing and ending of sessions ---

// tryOpen opens a one-hour session as identity id (the attacker's TTL) and
// returns it, or the status the open was refused with.
func (as *authServer) tryOpen(t *testing.T, id string) (*rawSession, error) {
	t.Helper()
	r := as.session(t, as.tok[id], &dlmpb.OpenRequest{Ttl: durationpb.New(time.Hour), Label: id})
	m, err := r.stream.Recv()
	if err != nil {
		return nil, err
	}
	o := m.GetOpened()
	if o == nil {
		t.Fatalf("%s: want SessionOpened, got %v", id, m)
	}
	r.sid = o.GetSession()
	if r.recv().GetSync() == nil {
		t.Fatalf("%s: no SessionSync", id)
	}
	return r, nil
}

// flood opens sessions as id until one is refused or max are open, and
// returns those open and the refusal.
func (as *authServer) flood(t *testing.T, id string, max int) ([]*rawSession, error) {
	t.Helper()
	var open []*rawSession
	for len(open) < max {
		r, err := as.tryOpen(t, id)
		if err != nil {
			return open, err
		}
		open = append(open, r)
	}
	return open, nil
}

// closeSession closes r's session and reads until SessionClosed (past the
// releases of its locks).
func closeSession(r *rawSession) {
	r.t.Helper()
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
	for {
		m := r.recvSkipAcks()
		if m.GetClosed() != nil {
			return
		}
		if m.GetReleased() == nil && m.GetCancelled() == nil {
			r.t.Fatalf("closing session %d: want SessionClosed, got %v", r.sid, m)
		}
	}
}

// awaitExpired reads r's stream until SessionExpired (past the releases
// of its locks).
func awaitExpired(r *rawSession) {
	r.t.Helper()
	for {
		m := r.recvSkipAcks()
		if m.GetExpired().GetSession() == r.sid {
			return
		}
		if m.GetReleased() == nil && m.GetCancelled() == nil {
			r.t.Fatalf("session %d: want SessionExpired, got %v", r.sid, m)
		}
	}
}

// admin returns a gRPC client and a context carrying identity id's token.
func (as *authServer) admin(t *testing.T, id string) (dlmpb.DLMClient, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return dialGRPC(t, as.Addr(), nil), bearer(ctx, as.tok[id])
}

// A token with lock rights on a/ alone opened one-hour sessions until the
// server's session limit, after which nobody else could open one. With a
// quota per identity, the flood stops at the quota, with ResourceExhausted
// naming the identity and its quota, and others still open sessions.
func TestAttackSessionFloodStopsAtTheQuota(t *testing.T) {
	const quota, limit = 4, 12
	as := startAuthServer(t, ServerConfig{Node: Config{
		Limits: locktable.Limits{MaxSessions: limit},
		Quotas: Quotas{SessionsPerIdentity: quota},
	}})
	open, err := as.flood(t, "alice", limit)
	if len(open) != quota {
		t.Fatalf("alice opened %d sessions (then %v), want her quota, %d", len(open), err, quota)
	}
	wantCode(t, err, codes.ResourceExhausted, "alice's session past her quota")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"alice"`) || !strings.Contains(msg, fmt.Sprint(quota)) {
		t.Fatalf("refusal %q does not name the identity and its quota", msg)
	}
	// Another identity, and then the admin, still get sessions.
	as.openAs(t, "bob", "bob")
	as.openAs(t, "ops", "dashboard")
	// Ending one of alice's sessions gives her room for one more.
	closeSession(open[0])
	if _, err := as.tryOpen(t, "alice"); err != nil {
		t.Fatalf("alice, after closing one of %d sessions: %v", quota, err)
	}
	if _, err := as.tryOpen(t, "alice"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice, at her quota again: %v, want ResourceExhausted", err)
	}
}

// Sessions are durable: after a restart (from a snapshot and the log after
// it) the flooder is still at its quota, and others still have room.
func TestAttackSessionQuotaSurvivesRestart(t *testing.T) {
	const quota = 3
	as := startAuthServer(t, ServerConfig{Node: Config{Dir: t.TempDir(), Quotas: Quotas{SessionsPerIdentity: quota}}})
	if open, err := as.flood(t, "alice", quota-1); len(open) != quota-1 {
		t.Fatalf("alice opened %d sessions, then %v", len(open), err)
	}
	if err := as.Node().raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := as.tryOpen(t, "alice"); err != nil {
		t.Fatal(err)
	}
	cfg := as.cfg
	cfg.Node.BindAddr = as.Node().Addr()
	if err := as.Close(); err != nil {
		t.Fatal(err)
	}

	as = &authServer{Server: startServer(t, cfg), tok: as.tok, logs: as.logs}
	if _, err := as.tryOpen(t, "alice"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice after the restart: %v, want ResourceExhausted (at her quota)", err)
	}
	as.openAs(t, "bob", "bob")
	c, ctx := as.admin(t, "ops")
	resp, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{Owner: "alice"})
	if err != nil || resp.GetOwnerSessions() != quota || len(resp.GetSessions()) != quota {
		t.Fatalf("alice's sessions after the restart: %v, %v; want %d", resp, err, quota)
	}
}

// Locks, held or queued, count against the identity's lock quota across
// its sessions; the lock past it is refused with REASON_QUOTA and changes
// nothing. Releasing, or ending a session, gives the room back, and other
// identities are not affected.
func TestAttackLockFloodStopsAtTheQuota(t *testing.T) {
	const quota = 5
	as := startAuthServer(t, ServerConfig{Node: Config{Quotas: Quotas{LocksPerIdentity: quota}}})
	a1 := as.openAs(t, "alice", "a1")
	a2 := as.openAs(t, "alice", "a2")
	var held []uint64
	for i := range 3 {
		held = append(held, a1.granted(a1.lock(fmt.Sprintf("a/%d", i), dlmpb.Mode_MODE_EX)).GetLockId())
	}
	a2.granted(a2.lock("a/3", dlmpb.Mode_MODE_EX))
	// The fifth: a2 queued behind a1 on a/0 (a waiter is a lock too).
	seq := a2.lock("a/0", dlmpb.Mode_MODE_EX)
	if m := a2.recvSkipAcks(); m.GetQueued() == nil || m.GetQueued().GetId().GetSeq() != seq {
		t.Fatalf("want Queued, got %v", m)
	}
	// The sixth, in either session: refused, naming alice's quota.
	for _, r := range []*rawSession{a1, a2} {
		ref := r.refusal(r.lock("a/new", dlmpb.Mode_MODE_NL), dlmpb.Reason_REASON_QUOTA)
		if !strings.Contains(ref.GetMessage(), `"alice"`) || !strings.Contains(ref.GetMessage(), fmt.Sprint(quota)) {
			t.Fatalf("refusal %q does not name the identity and its quota", ref.GetMessage())
		}
	}
	// bob is not affected: he has his whole quota.
	b := as.openAs(t, "bob", "bob")
	for i := range quota {
		b.granted(b.lock(fmt.Sprintf("b/%d", i), dlmpb.Mode_MODE_EX))
	}
	// A release gives one back.
	a1.release(held[2])
	if a1.recvSkipAcks().GetReleased() == nil {
		t.Fatal("no Released")
	}
	a1.granted(a1.lock("a/again", dlmpb.Mode_MODE_EX))
	a1.refusal(a1.lock("a/over", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_QUOTA)
	// Closing a1 gives its three back (and grants a2's waiter).
	closeSession(a1)
	if g := a2.recvSkipAcks().GetGranted(); g == nil {
		t.Fatal("a2's waiter: want Granted after a1 closed")
	}
	for i := range 3 {
		a2.granted(a2.lock(fmt.Sprintf("a/more/%d", i), dlmpb.Mode_MODE_EX))
	}
	a2.refusal(a2.lock("a/over", dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_QUOTA)
}

// The original flood, up to the server's session limit (a quota as large
// as the limit): nobody can open a session any more, but the admin lists
// the flooder's sessions and ends them with unary calls, through the log
// (their locks are released and their holders told), and then opens its
// own. Nobody else may list or end sessions.
func TestAttackAdminEndsASessionFlood(t *testing.T) {
	const limit = 8
	as := startAuthServer(t, ServerConfig{Node: Config{
		Limits: locktable.Limits{MaxSessions: limit},
		Quotas: Quotas{SessionsPerIdentity: limit},
	}})
	b := as.openAs(t, "bob", "bob")
	flood, err := as.flood(t, "alice", limit)
	if len(flood) != limit-1 || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice opened %d sessions, then %v; want %d, then ResourceExhausted", len(flood), err, limit-1)
	}
	holder := flood[0]
	g := holder.granted(holder.lock("a/x", dlmpb.Mode_MODE_EX))
	seq := b.lock("a/x", dlmpb.Mode_MODE_EX)
	if m := b.recvSkipAcks(); m.GetQueued().GetId().GetSeq() != seq {
		t.Fatalf("bob: want Queued, got %v", m)
	}
	if _, err := as.tryOpen(t, "ops"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("ops in a full server: %v, want ResourceExhausted", err)
	}

	// Only the admin may list and end sessions.
	for _, id := range []string{"alice", "bob", "carol"} {
		c, ctx := as.admin(t, id)
		_, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{})
		wantCode(t, err, codes.PermissionDenied, id+": ListSessions")
		_, err = c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Owner: "alice"})
		wantCode(t, err, codes.PermissionDenied, id+": KillSessions")
	}

	// The admin pages through alice's sessions.
	c, ctx := as.admin(t, "ops")
	var listed []*dlmpb.SessionSummary
	var after uint64
	for pages := 0; ; pages++ {
		resp, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{Owner: "alice", After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetSessions()) > 3 || pages > limit {
			t.Fatalf("page of %d sessions, at most 3 asked for (page %d)", len(resp.GetSessions()), pages)
		}
		if resp.GetOwnerSessions() != limit-1 || resp.GetSessionQuota() != limit {
			t.Fatalf("alice uses %d sessions of %d, want %d of %d", resp.GetOwnerSessions(), resp.GetSessionQuota(), limit-1, limit)
		}
		listed = append(listed, resp.GetSessions()...)
		if after = resp.GetNext(); after == 0 {
			break
		}
	}
	if len(listed) != limit-1 {
		t.Fatalf("listed %d of alice's sessions, want %d", len(listed), limit-1)
	}
	for i, s := range listed {
		if s.GetOwner() != "alice" || s.GetId() != flood[i].sid || s.GetTtl().AsDuration() != time.Hour || s.GetOpenedAtUnixNano() == 0 || s.GetExpiresInMs() <= 0 {
			t.Fatalf("session %d listed as %v", flood[i].sid, s)
		}
		want := int64(0)
		if i == 0 {
			want = 1 // the holder of a/x
		}
		if s.GetLocks() != want {
			t.Fatalf("session %d lists %d locks, want %d", s.GetId(), s.GetLocks(), want)
		}
	}

	// The admin ends them all; their streams are told, bob gets a/x.
	resp, err := c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetSessions()) != limit-1 {
		t.Fatalf("killed %v, want alice's %d sessions", resp.GetSessions(), limit-1)
	}
	for _, r := range flood {
		awaitExpired(r)
	}
	if bg := b.recvSkipAcks().GetGranted(); bg == nil || bg.GetToken() <= g.GetToken() {
		t.Fatalf("bob: want a/x granted with a newer token after the kill, got %v", bg)
	}
	as.openAs(t, "ops", "dashboard")
	left, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{Owner: "alice"})
	if err != nil || len(left.GetSessions()) != 0 || left.GetOwnerSessions() != 0 {
		t.Fatalf("after the kill: %v, %v; want no session of alice", left, err)
	}
	// By id: bob's session.
	resp, err = c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Sessions: []uint64{b.sid, 999999}})
	if err != nil || len(resp.GetSessions()) != 1 || resp.GetSessions()[0] != b.sid {
		t.Fatalf("kill bob's session and an unknown one: %v, %v; want [%d]", resp, err, b.sid)
	}
	awaitExpired(b)
}

// eventFeedAs opens /v1/events with identity id's token and returns the
// status and body of a refusal, or 200 and "" while the stream stays open
// until the test ends.
func (as *authServer) eventFeedAs(t *testing.T, id string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+as.HTTPAddr()+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+as.tok[id])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // drains the stream until the test ends
		defer wg.Done()
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return http.StatusOK, ""
}

// One low-privilege token could take every /v1/events slot, with no time
// limit, shutting the dashboard out. Each identity now has a few, and the
// non-admins together leave AdminEventStreams to the admins.
func TestAttackEventFeedSlotsPerIdentity(t *testing.T) {
	const perIdentity = 8 // above the default, so that two identities reach the shared bound
	as := startAuthServer(t, ServerConfig{MaxEventStreamsPerIdentity: perIdentity})
	for i := range perIdentity {
		if code, body := as.eventFeedAs(t, "alice"); code != http.StatusOK {
			t.Fatalf("alice's stream %d: %d %s", i+1, code, body)
		}
	}
	code, body := as.eventFeedAs(t, "alice")
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"alice"`) || !strings.Contains(body, fmt.Sprint(perIdentity)) {
		t.Fatalf("alice's stream %d: %d %q; want 429 naming her and her bound", perIdentity+1, code, body)
	}
	// bob, another non-admin, gets what the non-admins may share.
	nonAdmin := MaxEventStreams - AdminEventStreams
	for i := perIdentity; i < nonAdmin; i++ {
		if code, body := as.eventFeedAs(t, "bob"); code != http.StatusOK {
			t.Fatalf("bob's stream %d: %d %s", i-perIdentity+1, code, body)
		}
	}
	if code, body := as.eventFeedAs(t, "bob"); code != http.StatusServiceUnavailable || body == "" {
		t.Fatalf("bob past the non-admins' %d streams: %d %q; want 503", nonAdmin, code, body)
	}
	// The admin's dashboard still has its slots, and no more.
	for i := range AdminEventStreams {
		if code, body := as.eventFeedAs(t, "ops"); code != http.StatusOK {
			t.Fatalf("ops's stream %d: %d %s", i+1, code, body)
		}
	}
	if code, _ := as.eventFeedAs(t, "ops"); code != http.StatusServiceUnavailable {
		t.Fatalf("ops past %d streams: %d, want 503", MaxEventStreams, code)
	}
}

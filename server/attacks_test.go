package server

// The attack list: what one client tried against the server to hurt the
// others (take over their sessions, get stale answers, exhaust memory
// inside the documented limits, probe what it may not see), each driven
// the way the attacker did (raw gRPC messages through api/dlmpb, raw HTTP)
// and each failing on the code before its fix. The list grows: a new
// attack gets its test here, under a header naming where it was reported,
// and docs/limits.md lists it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/httpapi"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// --- Issue 17, items 1, 2 and 9: session takeover, request-id replay, NOT_OWNER probing ---

// resumeAttempt sends an open that resumes session sid with token on a new
// stream and returns the stream's first answer or error.
func resumeAttempt(t *testing.T, s *Server, sid uint64, token []byte) (*dlmpb.SessionResponse, error) {
	t.Helper()
	r := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{
		Session: sid, Ttl: durationpb.New(time.Minute), Label: "intruder", ResumeToken: token}}})
	return r.stream.Recv()
}

// randomBytes returns n random bytes.
func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// wantWarning expects a SessionWarning about a refused resume on r.
func (r *rawSession) wantWarning() *dlmpb.SessionWarning {
	r.t.Helper()
	m := r.recvSkipAcks()
	w := m.GetWarning()
	if w == nil || w.GetReason() != dlmpb.Reason_REASON_BAD_RESUME_TOKEN {
		r.t.Fatalf("want SessionWarning REASON_BAD_RESUME_TOKEN, got %v", m)
	}
	if !strings.Contains(w.GetMessage(), "resume") || !strings.Contains(w.GetMessage(), "127.0.0.1") {
		r.t.Fatalf("warning %q: want it to say a resume was refused, and from where", w.GetMessage())
	}
	return w
}

// tokenForms are the ways a resume token could show up in text.
func tokenForms(tok []byte) []string {
	return []string{string(tok), hex.EncodeToString(tok), base64.StdEncoding.EncodeToString(tok),
		base64.RawStdEncoding.EncodeToString(tok), base64.URLEncoding.EncodeToString(tok), base64.RawURLEncoding.EncodeToString(tok)}
}

// noToken fails if text shows tok in any of its usual forms.
func noToken(t *testing.T, where, text string, tok []byte) {
	t.Helper()
	for _, f := range tokenForms(tok) {
		if strings.Contains(text, f) {
			t.Fatalf("%s shows the resume token (%q)", where, f)
		}
	}
}

// Item 1, open mode: session ids are small sequential numbers, so anyone
// could resume another client's session with OpenRequest{Session: id}, get
// its locks and abort its stream. Resuming needs the session's resume
// token; a wrong or missing one is refused with PermissionDenied, nothing
// is attached, and the owner's stream stays open and is warned.
func TestAttackSessionTakeoverByGuessedID(t *testing.T) {
	logs := &servertest.LogBuffer{}
	s := startServer(t, Config{Logger: logs.Logger()})
	owner, _ := open(t, s, 0, time.Minute)
	if len(owner.token) != 16 {
		t.Fatalf("resume token of %d bytes, want 16 (128 bits)", len(owner.token))
	}
	g := owner.granted(owner.lock("owned", dlmpb.Mode_MODE_EX))
	other, _ := open(t, s, 0, time.Minute)

	attempts := []struct {
		name  string
		token []byte
	}{
		{"no token", nil},
		{"random token", randomBytes(t, 16)},
		{"another session's token", other.token},
		{"the token's hash", func() []byte { h := sha256.Sum256(owner.token); return h[:] }()},
		{"a prefix of the token", owner.token[:min(8, len(owner.token))]},
	}
	for _, a := range attempts {
		m, err := resumeAttempt(t, s, owner.sid, a.token)
		if err == nil {
			t.Fatalf("%s: resume of session %d answered %v, want PermissionDenied", a.name, owner.sid, m)
		}
		wantCode(t, err, codes.PermissionDenied, a.name)
		if !strings.Contains(err.Error(), "resume token") {
			t.Fatalf("%s: %v: want the refusal to name the resume token", a.name, err)
		}
		owner.wantWarning()
	}
	// The owner's stream is alive and its lock its own: it releases it.
	owner.release(g.GetLockId())
	if rel := owner.recvSkipAcks().GetReleased(); rel.GetLockId() != g.GetLockId() {
		t.Fatalf("owner's release after the attempts: %v", rel)
	}
	// The refusals are counted.
	code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/metrics", "")
	if want := fmt.Sprintf("dlm_server_resume_refused_total %d", len(attempts)); code != 200 || !strings.Contains(body, want) {
		t.Fatalf("/metrics: want %q", want)
	}

	// The owner itself resumes with its token (a reconnect), once the old
	// stream is gone; the token is neither listed nor logged.
	owner.cancel()
	r, _ := resume(t, s, owner, time.Minute)
	r.granted(r.lock("again", dlmpb.Mode_MODE_EX))
	_, sessions := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/v1/sessions", "")
	_, resources := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/v1/resources", "")
	feedCode, feed := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/v1/events", "") // the dashboard's feed, to its first event
	if feedCode != 200 || !strings.Contains(feed, "data: ") {
		t.Fatalf("/v1/events %d:\n%s", feedCode, feed)
	}
	list, err := s.List(context.Background(), &dlmpb.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range [][]byte{owner.token, other.token} {
		noToken(t, "/v1/sessions", sessions, tok)
		noToken(t, "/v1/resources", resources, tok)
		noToken(t, "/v1/events", feed, tok)
		noToken(t, "List", list.String(), tok)
		noToken(t, "the server's log", logs.String(), tok)
		noToken(t, "the snapshot", string(servertest.SnapshotBytes(t, s.Node().FSM())), tok)
	}
	if !strings.Contains(logs.String(), "resume") {
		t.Fatal("the refused resumes were not logged")
	}
}

// Item 1, token mode: any holder of the same identity could resume a
// session of that identity. The identity check stays, and the resume token
// is needed on top of it.
func TestAttackSessionTakeoverSameIdentity(t *testing.T) {
	as := startAuthServer(t, Config{})
	alice := as.openAs(t, "alice", "first")
	lockID := alice.granted(alice.lock("a/held", dlmpb.Mode_MODE_EX)).GetLockId()

	// Another program with alice's bearer token guesses the id.
	for _, tok := range [][]byte{nil, randomBytes(t, 16)} {
		_, err := as.session(t, as.tok["alice"], &dlmpb.OpenRequest{Session: alice.sid, ResumeToken: tok}).stream.Recv()
		wantCode(t, err, codes.PermissionDenied, "alice's token without the session's resume token")
		alice.wantWarning()
	}
	// bob, with the right resume token, is still refused (identity check).
	_, err := as.session(t, as.tok["bob"], &dlmpb.OpenRequest{Session: alice.sid, ResumeToken: alice.token}).stream.Recv()
	wantCode(t, err, codes.PermissionDenied, "bob with alice's resume token")
	if got := as.holder(lockID); got != alice.sid {
		t.Fatalf("lock %d held by %d after the attempts, want alice's %d", lockID, got, alice.sid)
	}
	// alice's own resume works.
	alice.cancel()
	r := as.session(t, as.tok["alice"], &dlmpb.OpenRequest{Session: alice.sid, ResumeToken: alice.token})
	if o := r.recv().GetOpened(); !o.GetResumed() || o.GetSession() != alice.sid {
		t.Fatalf("alice's resume: %v", o)
	}
	noToken(t, "the server's log", as.logs.String(), alice.token)
}

// lockAgain sends lock request seq of r again, with mut applied.
func (r *rawSession) lockAgain(seq uint64, res string, mode dlmpb.Mode, mut ...func(*dlmpb.LockRequest)) {
	lr := &dlmpb.LockRequest{Id: &dlmpb.RequestID{Session: r.sid, Seq: seq}, Resource: res, Mode: mode, Owner: seq}
	for _, f := range mut {
		f(lr)
	}
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: lr}})
}

// convert converts lock to mode as the session's next request.
func (r *rawSession) convert(lock uint64, mode dlmpb.Mode) uint64 {
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: lock, Mode: mode}}})
	return r.seq
}

// Item 2: seq 5 reused for a lock on another resource was answered with the
// first resource's grant. A used id with different content is refused with
// REASON_REQUEST_ID_REUSED and changes nothing.
func TestAttackRequestIDReusedForAnotherRequest(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	seq := a.lock("first", dlmpb.Mode_MODE_EX)
	g := a.granted(seq)

	a.lockAgain(seq, "second", dlmpb.Mode_MODE_EX)
	if ref := a.refusal(seq, dlmpb.Reason_REASON_REQUEST_ID_REUSED); !strings.Contains(ref.GetMessage(), fmt.Sprint(seq)) {
		t.Fatalf("refusal %q does not name the request id", ref.GetMessage())
	}
	if s.mustList(t, "second") != nil {
		t.Fatal("the reused request id locked the second resource")
	}
	// Another field (the mode, the metadata) is another request too.
	a.lockAgain(seq, "first", dlmpb.Mode_MODE_PR)
	a.refusal(seq, dlmpb.Reason_REASON_REQUEST_ID_REUSED)
	a.lockAgain(seq, "first", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte("x") })
	a.refusal(seq, dlmpb.Reason_REASON_REQUEST_ID_REUSED)
	// A release under the lock's id is refused, and the lock stays.
	a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
		Id: &dlmpb.RequestID{Session: a.sid, Seq: seq}, LockId: g.GetLockId()}}})
	a.refusal(seq, dlmpb.Reason_REASON_REQUEST_ID_REUSED)
	if h := s.mustList(t, "first").GetHolders(); len(h) != 1 || h[0].GetLockId() != g.GetLockId() {
		t.Fatalf("holders of first: %v", h)
	}
	// The same request again is still a retry.
	a.lockAgain(seq, "first", dlmpb.Mode_MODE_EX)
	if again := a.granted(seq); again.GetLockId() != g.GetLockId() || again.GetToken() != g.GetToken() {
		t.Fatalf("retry answered %v, want %v", again, g)
	}
}

// Item 2: replaying a lock's seq after its release, and after another
// session was granted the resource, answered "granted" with the old lock id
// and token. A replay is answered with the current truth.
func TestAttackReplayAfterRelease(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	seq := a.lock("r", dlmpb.Mode_MODE_EX)
	g := a.granted(seq)

	// While the lock lives, a replay reports it as it is now: converted.
	cv := a.granted(a.convert(g.GetLockId(), dlmpb.Mode_MODE_PR))
	a.lockAgain(seq, "r", dlmpb.Mode_MODE_EX)
	if now := a.granted(seq); now.GetLockId() != g.GetLockId() || now.GetMode() != dlmpb.Mode_MODE_PR || now.GetToken() != cv.GetToken() {
		t.Fatalf("replay of a converted lock: %v, want lock %d in PR with token %d", now, g.GetLockId(), cv.GetToken())
	}

	a.release(g.GetLockId())
	relSeq := a.seq
	if rel := a.recvSkipAcks().GetReleased(); rel.GetLockId() != g.GetLockId() {
		t.Fatalf("release: %v", rel)
	}
	gb := b.granted(b.lock("r", dlmpb.Mode_MODE_EX))

	a.lockAgain(seq, "r", dlmpb.Mode_MODE_EX)
	ref := a.refusal(seq, dlmpb.Reason_REASON_UNKNOWN_LOCK)
	if ref.GetLockId() != g.GetLockId() || !strings.Contains(ref.GetMessage(), "answered before") {
		t.Fatalf("replay after release: %v, want UNKNOWN_LOCK for lock %d saying it was answered before", ref, g.GetLockId())
	}
	if h := s.mustList(t, "r").GetHolders(); len(h) != 1 || h[0].GetLockId() != gb.GetLockId() {
		t.Fatalf("holders after the replay: %v, want b's lock %d alone", h, gb.GetLockId())
	}
	// A release is a final fact: its replay answers as it did.
	a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
		Id: &dlmpb.RequestID{Session: a.sid, Seq: relSeq}, LockId: g.GetLockId()}}})
	if rel := a.recvSkipAcks().GetReleased(); rel.GetLockId() != g.GetLockId() || rel.GetId().GetSeq() != relSeq {
		t.Fatalf("replayed release: %v", rel)
	}
}

// Item 2: sequence numbers need not grow (2^64-1, then 12, were both
// accepted). A new seq at or below the session's highest is stale.
func TestAttackSequenceNumbersMustIncrease(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	a.granted(a.lock("first", dlmpb.Mode_MODE_EX))
	a.lockAgain(math.MaxUint64, "top", dlmpb.Mode_MODE_EX)
	a.granted(math.MaxUint64)
	a.lockAgain(12, "low", dlmpb.Mode_MODE_EX)
	a.refusal(12, dlmpb.Reason_REASON_STALE_REQUEST)
	if s.mustList(t, "low") != nil {
		t.Fatal("seq 12 after 2^64-1 was applied")
	}
	// Seq 0 still means "no deduplication".
	a.lockAgain(0, "unnumbered", dlmpb.Mode_MODE_EX)
	if g := a.recvSkipAcks().GetGranted(); g == nil {
		t.Fatal("seq 0 after 2^64-1 was not granted")
	}
}

// idNumbers matches the numbers in a refusal message.
var idNumbers = regexp.MustCompile(`[0-9]+`)

// Item 9: releasing another identity's lock answered NOT_OWNER where a
// missing lock answers UNKNOWN_LOCK, so lock ids outside one's prefix could
// be probed. Across identities both answers are the same.
func TestAttackForeignLockLooksMissing(t *testing.T) {
	as := startAuthServer(t, Config{})
	alice := as.openAs(t, "alice", "alice")
	held := alice.granted(alice.lock("a/held", dlmpb.Mode_MODE_EX)).GetLockId()
	bob := as.openAs(t, "bob", "bob")
	missing := held + 1000

	send := func(kind string, lock uint64) *dlmpb.Refused {
		t.Helper()
		bob.seq++
		id := &dlmpb.RequestID{Session: bob.sid, Seq: bob.seq}
		var m *dlmpb.SessionRequest
		switch kind {
		case "release":
			m = &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{Id: id, LockId: lock}}}
		case "convert":
			m = &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{Id: id, LockId: lock, Mode: dlmpb.Mode_MODE_NL}}}
		default:
			m = &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Cancel{Cancel: &dlmpb.CancelRequest{Id: id, LockId: lock}}}
		}
		bob.send(m)
		ref := bob.recvSkipAcks().GetRefused()
		if ref == nil {
			t.Fatalf("bob's %s of lock %d was not refused", kind, lock)
		}
		return ref
	}
	shape := func(r *dlmpb.Refused, lock uint64) string {
		msg := strings.ReplaceAll(r.GetMessage(), fmt.Sprint(lock), "<lock>")
		return fmt.Sprintf("%v %d %s", r.GetReason(), r.GetLockId(), idNumbers.ReplaceAllString(msg, "N"))
	}
	for _, kind := range []string{"release", "convert", "cancel"} {
		foreign, absent := send(kind, held), send(kind, missing)
		if foreign.GetReason() != dlmpb.Reason_REASON_UNKNOWN_LOCK {
			t.Fatalf("%s of another identity's lock: %v, want REASON_UNKNOWN_LOCK", kind, foreign)
		}
		if a, b := shape(foreign, held), shape(absent, missing); a != b {
			t.Fatalf("%s: another identity's lock answers %q, a missing one %q", kind, a, b)
		}
	}
	if got := as.holder(held); got != alice.sid {
		t.Fatalf("lock %d held by %d, want alice's %d", held, got, alice.sid)
	}
	// Within one identity NOT_OWNER stays.
	alice2 := as.openAs(t, "alice", "alice 2")
	alice2.release(held)
	alice2.refusal(alice2.seq, dlmpb.Reason_REASON_NOT_OWNER)
}

// --- Issue 17, item 3: caps on locks per resource and per server; every listing paged ---

// answers reads the answers to the n requests just sent on r (in any
// order), skipping acks and notices, and returns the grants and refusals
// by request sequence number.
func (r *rawSession) answers(n int) (granted map[uint64]*dlmpb.Granted, refused map[uint64]*dlmpb.Refused) {
	r.t.Helper()
	granted, refused = map[uint64]*dlmpb.Granted{}, map[uint64]*dlmpb.Refused{}
	for len(granted)+len(refused) < n {
		m := r.recvSkipAcks()
		switch {
		case m.GetGranted() != nil:
			granted[m.GetGranted().GetId().GetSeq()] = m.GetGranted()
		case m.GetRefused() != nil:
			refused[m.GetRefused().GetId().GetSeq()] = m.GetRefused()
		case m.GetQueued() != nil:
			granted[m.GetQueued().GetId().GetSeq()] = nil
		default:
			r.t.Fatalf("unexpected answer %v", m)
		}
	}
	return granted, refused
}

// TestAttackHolderFloodRefusedAtCap: the attacker's 20 sessions x 10,000
// NL locks on one resource, scaled down: 5 sessions x 20 NL locks on a
// resource capped at 40 locks. The first 40 are granted, every other one
// is refused with REASON_TOO_MANY_HOLDERS naming the resource and the
// bound; a conversion at the cap is still granted (it adds no lock), and
// other resources are not affected.
func TestAttackHolderFloodRefusedAtCap(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxLocksPerResource: 40, MaxLocksPerSession: 20}}})
	var sessions []*rawSession
	var aLock uint64
	total := 0
	for i := range 5 {
		r, _ := open(t, s, 0, 10*time.Second)
		sessions = append(sessions, r)
		for range 20 {
			r.lock("flood", dlmpb.Mode_MODE_NL)
		}
		granted, refused := r.answers(20)
		total += len(granted)
		for _, g := range granted {
			if g == nil {
				t.Fatal("an NL lock was queued")
			}
			aLock = g.GetLockId()
		}
		for seq, m := range refused {
			if m.GetReason() != dlmpb.Reason_REASON_TOO_MANY_HOLDERS || !strings.Contains(m.GetMessage(), `"flood" has 40 locks, the limit is 40`) {
				t.Fatalf("session %d, request %d refused with %v %q, want TOO_MANY_HOLDERS naming the resource and the bound", i, seq, m.GetReason(), m.GetMessage())
			}
		}
	}
	if total != 40 {
		t.Fatalf("%d NL locks granted on one resource, the cap is 40", total)
	}
	if st, _ := s.Status(context.Background(), nil); st.GetLocks() != 40 {
		t.Fatalf("the server holds %d locks, want 40", st.GetLocks())
	}
	// Session 2 owns aLock (the last granted): converting it adds no lock.
	r := sessions[1]
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: aLock, Mode: dlmpb.Mode_MODE_PR}}})
	r.granted(r.seq)
	// A session that was refused can lock elsewhere.
	sessions[4].granted(sessions[4].lock("elsewhere", dlmpb.Mode_MODE_EX))
}

// TestAttackServerWideLockCap: locks spread over many resources and
// sessions stop at the server-wide bound, with REASON_TOO_MANY_LOCKS
// saying so; a release makes room again.
func TestAttackServerWideLockCap(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxLocks: 30}}})
	var first *rawSession
	var firstLock uint64
	total := 0
	for i := range 4 {
		r, _ := open(t, s, 0, 10*time.Second)
		for j := range 10 {
			r.lock(fmt.Sprintf("wide/%d/%d", i, j), dlmpb.Mode_MODE_EX)
		}
		granted, refused := r.answers(10)
		total += len(granted)
		if i == 0 {
			first, firstLock = r, granted[1].GetLockId()
		}
		for seq, m := range refused {
			if m.GetReason() != dlmpb.Reason_REASON_TOO_MANY_LOCKS || !strings.Contains(m.GetMessage(), "the table has 30 locks, the limit is 30") {
				t.Fatalf("request %d refused with %v %q, want TOO_MANY_LOCKS for the table", seq, m.GetReason(), m.GetMessage())
			}
		}
	}
	if total != 30 {
		t.Fatalf("%d locks granted, the server-wide cap is 30", total)
	}
	first.release(firstLock)
	if m := first.recvSkipAcks(); m.GetReleased() == nil {
		t.Fatalf("release: %v", m)
	}
	first.granted(first.lock("wide/again", dlmpb.Mode_MODE_EX))
}

// bigResource fills resource "big" with 2 x 600 PR holders (one of them
// converting to EX) and 5 EX waiters, and puts one lock on "a" and "z" (a
// metadata of 1 KiB each), so that a listing must cut "big" across pages.
// It returns the sessions.
func bigResource(t *testing.T, s *Server) []*rawSession {
	meta := func(l *dlmpb.LockRequest) { l.Metadata = []byte(strings.Repeat("m", protocol.MaxMetadataBytes)) }
	var rs []*rawSession
	for range 2 {
		r, _ := open(t, s, 0, 10*time.Second)
		for range 600 {
			r.lock("big", dlmpb.Mode_MODE_PR, meta)
		}
		if granted, refused := r.answers(600); len(granted) != 600 {
			t.Fatalf("%d granted, refusals %v", len(granted), refused)
		}
		rs = append(rs, r)
	}
	r, _ := open(t, s, 0, 10*time.Second)
	r.granted(r.lock("a", dlmpb.Mode_MODE_EX, meta))
	r.granted(r.lock("z", dlmpb.Mode_MODE_EX, meta))
	for range 5 {
		r.lock("big", dlmpb.Mode_MODE_EX, meta)
	}
	if _, refused := r.answers(5); len(refused) != 0 {
		t.Fatalf("waiters refused: %v", refused)
	}
	// Session 1's lock 7th lock converts to EX: queued behind the others.
	var conv uint64
	s.Node().FSM().Read(func(v fsm.View) {
		tb := v.Table()
		ri, _ := tb.Resource("big")
		conv = uint64(ri.Holders[7].ID)
	})
	c := rs[0]
	c.seq++
	c.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: c.sid, Seq: c.seq}, LockId: conv, Mode: dlmpb.Mode_MODE_EX}}})
	if m := c.recvSkipAcks(); m.GetQueued() == nil {
		t.Fatalf("conversion: %v", m)
	}
	return append(rs, r)
}

// entryIDs returns the lock ids of a resource's three lists, in order.
func entryIDs(r *dlmpb.ResourceInfo) []uint64 {
	var ids []uint64
	for _, q := range [][]*dlmpb.LockInfo{r.GetHolders(), r.GetConverting(), r.GetWaiting()} {
		for _, l := range q {
			ids = append(ids, l.GetLockId())
		}
	}
	return ids
}

// wantEntries returns, by resource name, the lock ids of the three lists
// of every resource, in order, from the table itself.
func wantEntries(s *Server) map[string][]uint64 {
	want := map[string][]uint64{}
	s.Node().FSM().Read(func(v fsm.View) {
		tb := v.Table()
		for _, ri := range tb.Resources("", 0) {
			for _, q := range [][]locktable.LockInfo{ri.Holders, ri.Converting, ri.Waiting} {
				for _, l := range q {
					want[ri.Name] = append(want[ri.Name], uint64(l.ID))
				}
			}
		}
	})
	return want
}

// joinPages checks that the pages read hold at most maxEntries entries
// each, that cut resources continue where they stopped, and that the
// entries joined are those of the table, each exactly once.
func joinPages(t *testing.T, s *Server, pages []*dlmpb.ListResponse, maxEntries int) {
	t.Helper()
	got := map[string][]uint64{}
	var last *dlmpb.ResourceInfo
	for i, p := range pages {
		n := 0
		for _, r := range p.GetResources() {
			ids := entryIDs(r)
			n += len(ids)
			if want := r.GetHoldersTotal() + r.GetConvertingTotal() + r.GetWaitingTotal(); r.GetContinues() != (r.GetFirst()+uint32(len(ids)) < want) {
				t.Fatalf("page %d: %q from %d with %d of %d entries, continues %v", i, r.GetName(), r.GetFirst(), len(ids), want, r.GetContinues())
			}
			if r.GetFirst() != uint32(len(got[r.GetName()])) || (r.GetFirst() > 0 && (last == nil || !last.GetContinues() || last.GetName() != r.GetName())) {
				t.Fatalf("page %d: %q starts at %d after %d entries of it", i, r.GetName(), r.GetFirst(), len(got[r.GetName()]))
			}
			got[r.GetName()] = append(got[r.GetName()], ids...)
			last = r
		}
		if n > maxEntries {
			t.Fatalf("page %d has %d entries, the bound is %d", i, n, maxEntries)
		}
	}
	want := wantEntries(s)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages joined: %d resources, want %d:\n got  %v\n want %v", len(got), len(want), got, want)
	}
}

// TestAttackListPagesBoundedByLocks: one resource with more locks than a
// page made List answer every lock at once (7 MB for 200,000, over gRPC's
// 4 MB). Pages are bounded by locks, 1000 by default or fewer on request,
// cut the resource and go on from the cursor; joined, they give every
// entry exactly once.
func TestAttackListPagesBoundedByLocks(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxLocksPerSession: 1000}}})
	bigResource(t, s)
	c := dialPB(t, s.Addr())
	read := func(req *dlmpb.ListRequest) []*dlmpb.ListResponse {
		var pages []*dlmpb.ListResponse
		for {
			resp, err := c.List(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if pages = append(pages, resp); resp.GetNext() == "" {
				return pages
			}
			if len(pages) > 5000 {
				t.Fatal("the listing does not end")
			}
			req.After = resp.GetNext()
		}
	}
	pages := read(&dlmpb.ListRequest{})
	if len(pages) < 2 {
		t.Fatalf("1,208 entries in %d page(s) of at most %d", len(pages), DefaultListLocks)
	}
	joinPages(t, s, pages, DefaultListLocks)
	joinPages(t, s, read(&dlmpb.ListRequest{LockLimit: 97, Limit: 2}), 97)
	joinPages(t, s, read(&dlmpb.ListRequest{LockLimit: MaxListLocks + 1}), MaxListLocks)
	if pages, want := read(&dlmpb.ListRequest{Prefix: "big", LockLimit: 1}), len(wantEntries(s)["big"]); len(pages) != want || want != 1206 {
		t.Fatalf("%d pages of one entry, want %d (1206)", len(pages), want)
	}

	// A cursor that is not one is refused, naming it.
	_, err := c.List(context.Background(), &dlmpb.ListRequest{After: "big\x00x"})
	wantCode(t, err, codes.InvalidArgument, "a malformed cursor")
	if !strings.Contains(err.Error(), `"big\x00x"`) {
		t.Fatalf("error %v does not name the cursor", err)
	}
}

// httpJSON gets path from s's HTTP server and decodes the JSON answer into
// v; it returns the status code and the body's size.
func httpJSON(t *testing.T, s *Server, path string, v any) (int, int) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, b)
		}
	}
	return resp.StatusCode, len(b)
}

// TestAttackHTTPListingsBounded: `curl /v1/resources` returned every lock
// of every resource (104 MB) and /v1/sessions every lock of every session.
// Both are paged now, by locks too, with a next cursor; joined, the pages
// give every lock exactly once.
func TestAttackHTTPListingsBounded(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Limits: locktable.Limits{MaxLocksPerSession: 1000}}})
	rs := bigResource(t, s)

	readResources := func(query string) []*dlmpb.ListResponse {
		var pages []*dlmpb.ListResponse
		after := ""
		for len(pages) <= 1000 {
			var raw json.RawMessage
			path := "/v1/resources?" + query + "&after=" + url.QueryEscape(after)
			if code, _ := httpJSON(t, s, path, &raw); code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			resp := new(dlmpb.ListResponse)
			if err := protojson.Unmarshal(raw, resp); err != nil {
				t.Fatal(err)
			}
			if pages = append(pages, resp); resp.GetNext() == "" {
				return pages
			}
			after = resp.GetNext()
		}
		t.Fatal("the listing does not end")
		return nil
	}
	joinPages(t, s, readResources(""), DefaultListLocks)
	joinPages(t, s, readResources("locks=50&limit=3"), 50)

	// Sessions: each page at most limit sessions and locks locks.
	readSessions := func(query string, maxSessions, maxLocks int) map[uint64][]uint64 {
		got := map[uint64][]uint64{}
		after := ""
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatal("the listing does not end")
			}
			var raw json.RawMessage
			path := "/v1/sessions?" + query + "&after=" + url.QueryEscape(after)
			if code, _ := httpJSON(t, s, path, &raw); code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			p := new(dlmpb.SessionPage)
			if err := protojson.Unmarshal(raw, p); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, si := range p.GetSessions() {
				id, first, locks := si.GetId(), int(si.GetFirst()), si.GetLocks()
				n += len(locks)
				if first != len(got[id]) || si.GetContinues() != (first+len(locks) < int(si.GetLockCount())) {
					t.Fatalf("%s: session %d from %d with %d of %d locks, continues %v, after %d of them", path, id, first, len(locks), si.GetLockCount(), si.GetContinues(), len(got[id]))
				}
				for _, l := range locks {
					got[id] = append(got[id], l.GetLockId())
				}
			}
			if n > maxLocks || len(p.Sessions) > maxSessions {
				t.Fatalf("%s: %d sessions and %d locks, the bounds are %d and %d", path, len(p.Sessions), n, maxSessions, maxLocks)
			}
			if p.GetNext() == "" {
				return got
			}
			after = p.GetNext()
		}
	}
	want := map[uint64][]uint64{}
	s.Node().FSM().Read(func(v fsm.View) {
		tb := v.Table()
		for _, si := range tb.Sessions(0, 0) {
			for _, l := range si.Locks {
				want[uint64(si.ID)] = append(want[uint64(si.ID)], uint64(l.ID))
			}
		}
	})
	if len(want) != len(rs) {
		t.Fatalf("%d sessions with locks, want %d", len(want), len(rs))
	}
	for _, q := range []struct {
		query           string
		sessions, locks int
	}{{"", DefaultListLimit, DefaultListLocks}, {"locks=70&limit=1", 1, 70}, {"locks=999999&limit=2", 2, MaxListLocks}} {
		if got := readSessions(q.query, q.sessions, q.locks); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: sessions joined\n got  %v\n want %v", q.query, got, want)
		}
	}

	for _, path := range []string{"/v1/sessions?after=x", "/v1/sessions?after=1:x", "/v1/sessions?locks=-1", "/v1/resources?locks=x", "/v1/resources?after=big%00-3"} {
		if code, _ := httpJSON(t, s, path, new(json.RawMessage)); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", path, code)
		}
	}
}

// TestAttackListPageSizeWorstCase measures the largest pages with the
// default limits: one resource at MaxLocksPerResource (10,000 locks, a
// name of the longest length, 1 KiB of metadata each), and as many
// one-lock resources as a page holds. Every page, in gRPC and in HTTP's
// JSON, stays well under gRPC's 4 MB.
func TestAttackListPageSizeWorstCase(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a resource with 10,000 locks")
	}
	s := startServer(t, Config{})
	meta := func(l *dlmpb.LockRequest) { l.Metadata = []byte(strings.Repeat("m", protocol.MaxMetadataBytes)) }
	big := strings.Repeat("b", raftnode.DefaultMaxNameLen)
	n := locktable.DefaultMaxLocksPerResource
	for range n / locktable.DefaultMaxLocksPerSession {
		r, _ := open(t, s, 0, time.Minute)
		for range locktable.DefaultMaxLocksPerSession {
			r.lock(big, dlmpb.Mode_MODE_NL, meta)
		}
		if granted, _ := r.answers(locktable.DefaultMaxLocksPerSession); len(granted) != locktable.DefaultMaxLocksPerSession {
			t.Fatalf("%d granted", len(granted))
		}
	}
	r, _ := open(t, s, 0, time.Minute)
	r.refusal(r.lock(big, dlmpb.Mode_MODE_NL), dlmpb.Reason_REASON_TOO_MANY_HOLDERS)
	for i := range MaxListLimit {
		r.lock(fmt.Sprintf("%s%06d", strings.Repeat("s", raftnode.DefaultMaxNameLen-6), i), dlmpb.Mode_MODE_EX, meta)
	}
	if granted, _ := r.answers(MaxListLimit); len(granted) != MaxListLimit {
		t.Fatalf("%d granted", len(granted))
	}

	const grpcMax = 4 << 20
	c := dialPB(t, s.Addr())
	largest, largestJSON, pages := 0, 0, 0
	for after := ""; ; pages++ {
		resp, err := c.List(context.Background(), &dlmpb.ListRequest{After: after, Limit: MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, proto.Size(resp))
		var raw json.RawMessage
		code, size := httpJSON(t, s, "/v1/resources?limit=1000&after="+url.QueryEscape(after), &raw)
		if code != http.StatusOK {
			t.Fatalf("/v1/resources: %d", code)
		}
		largestJSON = max(largestJSON, size)
		if after = resp.GetNext(); after == "" {
			break
		}
	}
	largestSessions := 0
	for after := ""; ; {
		var p struct{ Next string }
		code, size := httpJSON(t, s, "/v1/sessions?limit=1000&after="+url.QueryEscape(after), &p)
		if code != http.StatusOK {
			t.Fatalf("/v1/sessions: %d", code)
		}
		largestSessions = max(largestSessions, size)
		if after = p.Next; after == "" {
			break
		}
	}
	t.Logf("%d locks on one resource and %d one-lock resources, names of %d bytes, metadata of %d: %d pages, the largest %d bytes in gRPC, %d in JSON; the largest page of /v1/sessions %d bytes",
		n, MaxListLimit, raftnode.DefaultMaxNameLen, protocol.MaxMetadataBytes, pages+1, largest, largestJSON, largestSessions)
	if largest > grpcMax/3 || largestJSON > grpcMax/2 || largestSessions > grpcMax/2 {
		t.Fatalf("largest page %d bytes (gRPC), %d (JSON of /v1/resources), %d (/v1/sessions): over a third (half) of gRPC's 4 MB", largest, largestJSON, largestSessions)
	}
}

// The attacks of issue 17, each driven as the attacker drove it: raw
// gRPC messages through api/dlmpb against an in-process server.

// --- Issue 17, items 4, 6 and 10: per-stream memory, slow readers, stream plumbing ---

// openUnread opens a session on a connection whose flow-control windows
// are static (64 KiB, no BDP growth), so that what the transport absorbs
// of a stream the client never reads is known.
func openUnread(t *testing.T, s *Server) *rawSession {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := dlmpb.NewDLMClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawSession{t: t, stream: st, cancel: cancel}
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Minute)}}})
	o := r.recv().GetOpened()
	r.sid, r.token = o.GetSession(), o.GetResumeToken()
	if r.sid == 0 || r.recv().GetSync() == nil {
		t.Fatal("no SessionOpened and SessionSync")
	}
	return r
}

// floodReleases sends n releases of locks that do not exist, without
// reading a single answer: each is answered (Refused, UNKNOWN_LOCK) into
// the stream's queue.
func floodReleases(r *rawSession, n int) {
	r.t.Helper()
	for range n {
		r.seq++
		err := r.stream.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
			Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: 1_000_000 + r.seq}}})
		if err != nil {
			return // the server ended the stream: Recv tells why
		}
	}
}

// outboxOf returns the queue of session sid's stream.
func outboxOf(t *testing.T, s *Server, sid uint64) *outbox {
	t.Helper()
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	ob, ok := s.hub.boxes[locktable.SessionID(sid)].(*outbox)
	if !ok {
		t.Fatalf("session %d has no stream", sid)
	}
	return ob
}

// waitEnded waits until the server has ended ob (up to 20 s: "never"
// rather than "late"), before the client reads: a client that reads while
// the answers are still coming may keep up.
func waitEnded(t *testing.T, ob *outbox) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ob.isEnded() {
		if time.Now().After(deadline) {
			t.Fatalf("session %d: the stream of a client that does not read was not ended", ob.sid)
		}
		time.Sleep(time.Millisecond)
	}
}

// drainToEnd reads a stream to its end and returns how many messages came
// and the stream's final error.
func drainToEnd(r *rawSession) (int, error) {
	n := 0
	for {
		if _, err := r.stream.Recv(); err != nil {
			return n, err
		}
		n++
	}
}

// A client that never reads, not even once its stream was ended, does not
// keep the stream: the server gives it up at once (its handler returns,
// which ends the send that waited for the client), so the stream's
// goroutines and receive buffer go then, not when the client disconnects
// (before, the handler waited in Send for as long as the client lived).
// What the client did not read still reaches it, status last, if it ever
// reads.
func TestAttackNeverReadingClientLosesItsStream(t *testing.T) {
	// A queue larger than what gRPC takes before a send blocks (the
	// client's 64 KiB window plus the server's 64 KiB write quota), so
	// that it fills only while the send waits for the client.
	s := startServer(t, Config{MaxStreamQueueBytes: 1 << 20})
	r := openUnread(t, s)
	ob := outboxOf(t, s, r.sid)
	floodReleases(r, 20_000)
	waitEnded(t, ob)
	deadline := time.Now().Add(10 * time.Second)     // before the client's context ends the stream
	for testutil.ToFloat64(s.metrics.streams) != 0 { // the client has read nothing
		if time.Now().After(deadline) {
			t.Fatal("the server still serves the stream of a client that never reads")
		}
		time.Sleep(time.Millisecond)
	}
	_, err := drainToEnd(r)
	wantCode(t, err, codes.ResourceExhausted, "the ended stream's status")
}

// A client that sends requests and never reads the answers (8 such streams
// x 70,000 requests added 190 MB) has its stream ended once its queue
// passes MaxStreamQueueBytes, with ResourceExhausted saying that the
// session survives; the server-wide queued bytes never pass the stream's
// bound (plus the one message that found it full) and go back to zero.
func TestAttackUnreadRequestFloodEndsStream(t *testing.T) {
	const limit = 16 << 10
	s := startServer(t, Config{MaxStreamQueueBytes: limit})
	r := openUnread(t, s)
	ob := outboxOf(t, s, r.sid)
	floodReleases(r, 10_000) // about 600 KB of answers: far past the 64 KiB window and the queue
	waitEnded(t, ob)
	n, err := drainToEnd(r)
	wantCode(t, err, codes.ResourceExhausted, "flooded stream")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "session survives") || !strings.Contains(msg, "16384 bytes") {
		t.Fatalf("status message %q: want the limit and that the session survives", msg)
	}
	t.Logf("%d answers reached the client before the end", n)
	if peak := s.queue.peak(); peak > limit+StreamMessageOverhead+256 {
		t.Fatalf("queued bytes peaked at %d, the stream's bound is %d", peak, limit)
	}
	waitQueuedBytes(t, s, 0)
	// The session survives: it is resumed on a new stream.
	c, _ := resume(t, s, r, time.Minute)
	seq := c.lock("after-flood", dlmpb.Mode_MODE_EX)
	for { // answers to the flood's last requests may come first
		m := c.recvSkipAcks()
		if f := m.GetRefused(); f != nil && f.GetId().GetSeq() < seq {
			continue
		}
		if m.GetGranted().GetId().GetSeq() != seq {
			t.Fatalf("want Granted for request %d, got %v", seq, m)
		}
		break
	}
}

// waitQueuedBytes waits (up to 10 s: "never" rather than "late") until the
// server's queued bytes are want.
func waitQueuedBytes(t *testing.T, s *Server, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.queue.used() != want {
		if time.Now().After(deadline) {
			t.Fatalf("queued bytes %d, want %d", s.queue.used(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Several flooding streams together cannot queue more than MaxQueuedBytes:
// the one whose message would pass it is ended with ResourceExhausted.
func TestAttackFloodsPassingTheServerWideBoundEndStreams(t *testing.T) {
	const limit = 48 << 10
	s := startServer(t, Config{MaxQueuedBytes: limit})
	var (
		rs  []*rawSession
		obs []*outbox
	)
	for range 4 {
		r := openUnread(t, s)
		rs, obs = append(rs, r), append(obs, outboxOf(t, s, r.sid))
	}
	for _, r := range rs {
		floodReleases(r, 5_000) // each alone is far past the windows and the bound
	}
	for _, ob := range obs {
		waitEnded(t, ob)
	}
	for i, r := range rs {
		_, err := drainToEnd(r)
		wantCode(t, err, codes.ResourceExhausted, "flooded stream")
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "all streams") || !strings.Contains(msg, "session survives") {
			t.Fatalf("stream %d: status message %q: want the server-wide bound and that the session survives", i, msg)
		}
	}
	if peak := s.queue.peak(); peak > limit {
		t.Fatalf("queued bytes peaked at %d, the server-wide bound is %d", peak, limit)
	}
	waitQueuedBytes(t, s, 0)
}

// scriptedStream is a session stream whose client sends msgs, then nothing
// until its context ends.
type scriptedStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs chan *dlmpb.SessionRequest
}

func (f *scriptedStream) Context() context.Context { return f.ctx }
func (f *scriptedStream) Send(*dlmpb.SessionResponse) error {
	panic("read never sends")
}

func (f *scriptedStream) Recv() (*dlmpb.SessionRequest, error) {
	select {
	case m := <-f.msgs:
		return m, nil
	case <-f.ctx.Done():
		return nil, f.ctx.Err()
	}
}

// When the node refuses a request at Submit, the refusal is sent and the
// stream then ends: before, the reader stopped while the stream stayed
// open, taking no more requests (issue 17, item 10).
func TestAttackSubmitFailureEndsStream(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, time.Minute)
	sid := locktable.SessionID(r.sid)
	ob := newOutbox(sid, 100, 1<<20, s.queue)
	streamCtx, endStream := context.WithTimeout(context.Background(), 20*time.Second)
	defer endStream()
	st := &scriptedStream{ctx: streamCtx, msgs: make(chan *dlmpb.SessionRequest, 1)}
	st.msgs <- &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
		Id: &dlmpb.RequestID{Seq: 1}, Resource: "r", Mode: dlmpb.Mode_MODE_EX}}}
	submitCtx, cancel := context.WithCancel(context.Background())
	cancel() // Submit fails at once
	s.wg.Add(1)
	go s.read(submitCtx, st, sid, ob, auth.Unrestricted(), "")

	select {
	case <-ob.wake:
	case <-streamCtx.Done():
		t.Fatal("nothing queued")
	}
	var got []*dlmpb.SessionResponse
	for {
		msgs, ended, err := ob.take(nil)
		got = append(got, msgs...)
		if ended {
			if err == nil || status.Code(endStatus(err)) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want Unavailable", err)
			}
			break
		}
		select {
		case <-ob.wake:
		case <-streamCtx.Done():
			t.Fatalf("the stream was not ended after the refusal (%d messages queued)", len(got))
		}
	}
	if len(got) != 1 || got[0].GetRefused().GetReason() != dlmpb.Reason_REASON_NOT_LEADER || got[0].GetRefused().GetId().GetSeq() != 1 {
		t.Fatalf("queued %v, want the refusal of request 1 before the end", got)
	}
}

// A stream whose keepalives cannot be acknowledged (its client never
// reads, or acknowledgements stall: here the test holds its queue) does
// not stop other streams' readers: before, every reader handed its
// keepalives to one shared channel of 4,096, and once it was full every
// reader blocked.
func TestAttackStalledKeepalivesDoNotBlockOtherStreams(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	s.hub.mu.Lock()
	aq := s.hub.boxes[locktable.SessionID(a.sid)].(*outbox)
	s.hub.mu.Unlock()
	aq.mu.Lock() // a's acknowledgements stall
	held := true
	defer func() {
		if held {
			aq.mu.Unlock()
		}
	}()
	for i := range uint64(20_000) {
		a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: i + 1}}})
	}
	b.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: 1}}})
	seq := b.lock("r", dlmpb.Mode_MODE_EX)
	acked := false
	for { // b's reader goes on: its request is answered
		m := b.recv()
		if ack := m.GetKeepAliveAck(); ack != nil {
			acked = ack.GetSeq() == 1
			continue
		}
		if g := m.GetGranted(); g != nil && g.GetId().GetSeq() == seq {
			break
		}
		t.Fatalf("want Granted for request %d, got %v", seq, m)
	}
	aq.mu.Unlock()
	held = false
	for !acked { // and its keepalive acknowledged once acks flow again
		ack := b.recv().GetKeepAliveAck()
		if ack == nil || ack.GetSeq() != 1 {
			t.Fatalf("got %v, want the ack of keepalive 1", ack)
		}
		acked = true
	}
}

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
	as := startAuthServer(t, Config{Node: raftnode.Config{
		Limits: locktable.Limits{MaxSessions: limit},
		Quotas: fsm.Quotas{SessionsPerIdentity: quota},
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
	as := startAuthServer(t, Config{Node: raftnode.Config{Dir: t.TempDir(), Quotas: fsm.Quotas{SessionsPerIdentity: quota}}})
	if open, err := as.flood(t, "alice", quota-1); len(open) != quota-1 {
		t.Fatalf("alice opened %d sessions, then %v", len(open), err)
	}
	if err := as.Node().Snapshot(); err != nil {
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
	as := startAuthServer(t, Config{Node: raftnode.Config{Quotas: fsm.Quotas{LocksPerIdentity: quota}}})
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
	as := startAuthServer(t, Config{Node: raftnode.Config{
		Limits: locktable.Limits{MaxSessions: limit},
		Quotas: fsm.Quotas{SessionsPerIdentity: limit},
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
	var listed []*dlmpb.SessionInfo
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
		if s.GetOwner() != "alice" || s.GetId() != flood[i].sid || s.GetTtl().AsDuration() != time.Hour || s.GetOpenedAt().AsTime().Unix() <= 0 || s.GetExpiresIn().AsDuration() <= 0 {
			t.Fatalf("session %d listed as %v", flood[i].sid, s)
		}
		want := int64(0)
		if i == 0 {
			want = 1 // the holder of a/x
		}
		if s.GetLockCount() != want {
			t.Fatalf("session %d lists %d locks, want %d", s.GetId(), s.GetLockCount(), want)
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
// non-admins together leave httpapi.AdminEventStreams to the admins.
func TestAttackEventFeedSlotsPerIdentity(t *testing.T) {
	const perIdentity = 8 // above the default, so that two identities reach the shared bound
	as := startAuthServer(t, Config{MaxEventStreamsPerIdentity: perIdentity})
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
	nonAdmin := httpapi.MaxEventStreams - httpapi.AdminEventStreams
	for i := perIdentity; i < nonAdmin; i++ {
		if code, body := as.eventFeedAs(t, "bob"); code != http.StatusOK {
			t.Fatalf("bob's stream %d: %d %s", i-perIdentity+1, code, body)
		}
	}
	if code, body := as.eventFeedAs(t, "bob"); code != http.StatusServiceUnavailable || body == "" {
		t.Fatalf("bob past the non-admins' %d streams: %d %q; want 503", nonAdmin, code, body)
	}
	// The admin's dashboard still has its slots, and no more.
	for i := range httpapi.AdminEventStreams {
		if code, body := as.eventFeedAs(t, "ops"); code != http.StatusOK {
			t.Fatalf("ops's stream %d: %d %s", i+1, code, body)
		}
	}
	if code, _ := as.eventFeedAs(t, "ops"); code != http.StatusServiceUnavailable {
		t.Fatalf("ops past %d streams: %d, want 503", httpapi.MaxEventStreams, code)
	}
}

// Tests of the attacks of issue 17: each drives the server the way the
// attacker did, with raw gRPC messages through api/dlmpb.

// --- Issue 17, items 7-8: server-side checks of every client limit; error messages ---

// rawBytes is a message already encoded, sent as is by rawCodec: how an
// attacker sends what the generated code would refuse to encode.
type rawBytes []byte

// rawCodec sends rawBytes unchanged and encodes and decodes proto messages
// as usual, without checking UTF-8 on the way out.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// withRaw encodes m, whose string fields hold placeholder, with raw (of the
// same length) in its place: invalid UTF-8 that proto.Marshal refuses.
func withRaw(t *testing.T, m proto.Message, placeholder, raw string) rawBytes {
	t.Helper()
	if len(placeholder) != len(raw) {
		t.Fatalf("placeholder %q and raw %q differ in length", placeholder, raw)
	}
	b, err := proto.Marshal(m)
	if err != nil || !bytes.Contains(b, []byte(placeholder)) {
		t.Fatalf("encode %v: %v", m, err)
	}
	return bytes.ReplaceAll(b, []byte(placeholder), []byte(raw))
}

// rawStream opens a session stream that sends raw bytes: the open request,
// then whatever the test sends.
type rawStream struct {
	t  *testing.T
	cs grpc.ClientStream
}

func dialRaw(t *testing.T, s *Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func newRawStream(t *testing.T, s *Server, first rawBytes) *rawStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cs, err := dialRaw(t, s).NewStream(ctx, &dlmpb.DLM_ServiceDesc.Streams[0], dlmpb.DLM_Session_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawStream{t: t, cs: cs}
	r.send(first)
	return r
}

func (r *rawStream) send(b rawBytes) {
	r.t.Helper()
	if err := r.cs.SendMsg(b); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next message that is not a keepalive ack, or the
// stream's error.
func (r *rawStream) recv() (*dlmpb.SessionResponse, error) {
	for {
		m := &dlmpb.SessionResponse{}
		if err := r.cs.RecvMsg(m); err != nil {
			return nil, err
		}
		if m.GetKeepAliveAck() == nil {
			return m, nil
		}
	}
}

func encode(t *testing.T, m proto.Message) rawBytes {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantRefusal fails unless m refuses request seq with reason, its message
// containing every one of want.
func wantRefusal(t *testing.T, m *dlmpb.SessionResponse, seq uint64, reason dlmpb.Reason, want ...string) {
	t.Helper()
	ref := m.GetRefused()
	if ref == nil || ref.GetId().GetSeq() != seq || ref.GetReason() != reason {
		t.Fatalf("want Refused %v for request %d, got %v", reason, seq, m)
	}
	for _, w := range want {
		if !strings.Contains(ref.GetMessage(), w) {
			t.Fatalf("refusal of request %d: message %q does not say %q", seq, ref.GetMessage(), w)
		}
	}
}

// TestAttackSemaphoreLimits: a semaphore of 4294967295 permits was granted;
// the server now checks what the Go client checks (capacity in [1,
// protocol.MaxCapacity], permits in [1, capacity], a mode or a capacity), naming the
// value sent.
func TestAttackSemaphoreLimits(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 10*time.Second)
	sem := func(capacity, permits uint32) func(*dlmpb.LockRequest) {
		return func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = capacity, permits }
	}
	cases := []struct {
		name string
		mode dlmpb.Mode
		mut  func(*dlmpb.LockRequest)
		want string
	}{
		{"capacity 2^32-1", 0, sem(math.MaxUint32, 1), "capacity 4294967295"},
		{"capacity over protocol.MaxCapacity", 0, sem(protocol.MaxCapacity+1, 1), fmt.Sprint("capacity ", protocol.MaxCapacity+1)},
		{"no permits", 0, sem(4, 0), "0 permits"},
		{"permits over capacity", 0, sem(4, 5), "5 permits"},
		{"permits without capacity", dlmpb.Mode_MODE_EX, sem(0, 3), "3 permits"},
		{"neither mode nor capacity", 0, nil, "mode"},
	}
	for _, c := range cases {
		var muts []func(*dlmpb.LockRequest)
		if c.mut != nil {
			muts = append(muts, c.mut)
		}
		seq := r.lock("sem/"+c.name, c.mode, muts...)
		m := r.refusal(seq, dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%s: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 0 || st.GetLocks() != 0 {
		t.Fatalf("refused requests left %d resources, %d locks", st.GetResources(), st.GetLocks())
	}
	// The largest semaphore is still granted.
	r.granted(r.lock("sem/max", 0, sem(protocol.MaxCapacity, protocol.MaxCapacity)))
}

// TestAttackOtherClientLimits: the wait a lock request carries is checked
// as the Go client checks it; a bad one is refused for that request only.
// (The lease TTL requests carried, and its bounds, are gone from the
// protocol: see TestOldClientTTLIgnored.)
func TestAttackOtherClientLimits(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 10*time.Second)
	cases := []struct {
		name string
		mut  func(*dlmpb.LockRequest)
		want string
	}{
		{"negative wait", func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(-time.Second) }, "wait -1s"},
		{"malformed wait", func(l *dlmpb.LockRequest) { l.Wait = &durationpb.Duration{Seconds: -1, Nanos: 1} }, "wait"},
		{"empty name", func(l *dlmpb.LockRequest) { l.Resource = "" }, "empty"},
		{"metadata too long", func(l *dlmpb.LockRequest) { l.Metadata = make([]byte, protocol.MaxMetadataBytes+1) }, fmt.Sprint(protocol.MaxMetadataBytes+1, " bytes")},
	}
	for _, c := range cases {
		m := r.refusal(r.lock("limits", dlmpb.Mode_MODE_EX, c.mut), dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%s: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	r.granted(r.lock("limits", dlmpb.Mode_MODE_EX))
}

// TestAttackModesNamed: modes 7, -1 and 99999 were refused as "invalid lock
// mode: 0"; the refusal now names the value sent, in lock and convert
// requests.
func TestAttackModesNamed(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 10*time.Second)
	g := r.granted(r.lock("modes/held", dlmpb.Mode_MODE_NL))
	for _, mode := range []dlmpb.Mode{7, -1, 99999} {
		want := fmt.Sprintf("mode %d", int32(mode))
		m := r.refusal(r.lock("modes/new", mode), dlmpb.Reason_REASON_INVALID_MODE)
		if !strings.Contains(m.GetMessage(), want) {
			t.Errorf("lock in mode %d: refusal %q does not say %q", int32(mode), m.GetMessage(), want)
		}
		r.seq++
		r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
			Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: g.GetLockId(), Mode: mode}}})
		m = r.refusal(r.seq, dlmpb.Reason_REASON_INVALID_MODE)
		if !strings.Contains(m.GetMessage(), want) {
			t.Errorf("convert to mode %d: refusal %q does not say %q", int32(mode), m.GetMessage(), want)
		}
	}
	// The stream goes on.
	r.granted(r.lock("modes/after", dlmpb.Mode_MODE_EX))
}

// TestAttackInvalidUTF8Name: a resource name that is not UTF-8 got gRPC
// Internal and ended the whole session stream; now that request alone is
// refused (REASON_INVALID, naming the field) and the next one is granted.
func TestAttackInvalidUTF8Name(t *testing.T) {
	s := startServer(t, Config{})
	r := newRawStream(t, s, encode(t, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: t.Name()}}}))
	for _, want := range []string{"opened", "sync"} {
		if m, err := r.recv(); err != nil || (m.GetOpened() == nil && m.GetSync() == nil) {
			t.Fatalf("want %s, got %v %v", want, m, err)
		}
	}
	r.send(withRaw(t, servertest.LockMsg(1, "utf8/@@@", dlmpb.Mode_MODE_EX), "@@@", "\xff\xfeA"))
	m, err := r.recv()
	if err != nil {
		t.Fatalf("invalid UTF-8 resource ended the stream: %v", err)
	}
	wantRefusal(t, m, 1, dlmpb.Reason_REASON_INVALID, "resource", "UTF-8", "byte 5")
	r.send(encode(t, servertest.LockMsg(2, "utf8/ok", dlmpb.Mode_MODE_EX)))
	if m, err := r.recv(); err != nil || m.GetGranted().GetId().GetSeq() != 2 {
		t.Fatalf("the next request on the stream: %v %v, want Granted", m, err)
	}
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 1 {
		t.Fatalf("%d resources, want only utf8/ok", st.GetResources())
	}

	// A label that is not UTF-8 refuses the open (the stream's only
	// request) with InvalidArgument, not Internal.
	bad := newRawStream(t, s, withRaw(t, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: "label-@@"}}}, "@@", "\xc3("))
	_, err = bad.recv()
	wantCode(t, err, codes.InvalidArgument, "open with a label that is not UTF-8")
	if !strings.Contains(err.Error(), "label") {
		t.Fatalf("open with a label that is not UTF-8: %v does not name the label", err)
	}
}

// TestAttackControlCharactersInNames: NUL, other control characters and
// bidirectional formatting characters were accepted in names and shown in
// listings; resource names and session labels with them are now refused,
// naming the position and the code point.
func TestAttackControlCharactersInNames(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 10*time.Second)
	cases := []struct{ name, want string }{
		{"a\x00b", "U+0000 at byte 1"},
		{"ansi\x1b[31m", "U+001B at byte 4"},
		{"del\x7f", "U+007F at byte 3"},
		{"c1\u0085", "U+0085 at byte 2"},
		{"\u202Egnp.exe", "U+202E at byte 0"},
		{"lrm\u200E", "U+200E at byte 3"},
		{"isolate\u2066x\u2069", "U+2066 at byte 7"},
		{"alm\u061C", "U+061C at byte 3"},
	}
	for _, c := range cases {
		m := r.refusal(r.lock(c.name, dlmpb.Mode_MODE_EX), dlmpb.Reason_REASON_INVALID)
		if !strings.Contains(m.GetMessage(), c.want) {
			t.Errorf("%q: refusal %q does not say %q", c.name, m.GetMessage(), c.want)
		}
	}
	// Other Unicode is fine.
	r.granted(r.lock("ресурс/ü/世界/🔒 tab-free", dlmpb.Mode_MODE_EX))
	if st, _ := s.Status(context.Background(), nil); st.GetResources() != 1 {
		t.Fatalf("%d resources, want 1", st.GetResources())
	}

	for _, label := range []string{"nul\x00", "esc\x1b]0;title\x07", "rlo\u202E"} {
		_, err := stream(t, s, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: label}}}).stream.Recv()
		wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("open with label %q", label))
		if !strings.Contains(err.Error(), "label") || !strings.Contains(err.Error(), "U+") {
			t.Fatalf("open with label %q: %v names neither the label nor the code point", label, err)
		}
	}
}

// TestAttackListArguments: List with a prefix (or after) that is not UTF-8
// got Internal; it is now InvalidArgument, and so are control characters in
// a prefix and a negative limit (which the Go client refuses). The HTTP
// listings answer 400 to the same.
func TestAttackListArguments(t *testing.T) {
	s := startServer(t, Config{})
	conn := dialRaw(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list := func(req rawBytes) error {
		return conn.Invoke(ctx, dlmpb.DLM_List_FullMethodName, req, &dlmpb.ListResponse{})
	}
	for field, req := range map[string]rawBytes{
		"prefix": withRaw(t, &dlmpb.ListRequest{Prefix: "p@"}, "@", "\xff"),
		"after":  withRaw(t, &dlmpb.ListRequest{After: "a@"}, "@", "\x80"),
	} {
		err := list(req)
		wantCode(t, err, codes.InvalidArgument, "List with an "+field+" that is not UTF-8")
		if !strings.Contains(err.Error(), field) {
			t.Fatalf("List with an %s that is not UTF-8: %v does not name it", field, err)
		}
	}
	err := list(encode(t, &dlmpb.ListRequest{Prefix: "x\x00"}))
	wantCode(t, err, codes.InvalidArgument, "List with NUL in the prefix")
	err = list(encode(t, &dlmpb.ListRequest{Limit: -5}))
	wantCode(t, err, codes.InvalidArgument, "List with a negative limit")
	if !strings.Contains(err.Error(), "limit -5") {
		t.Fatalf("List with a negative limit: %v does not name it", err)
	}
	if err := list(encode(t, &dlmpb.ListRequest{Prefix: "ok/"})); err != nil {
		t.Fatalf("List with a good prefix: %v", err)
	}

	for _, path := range []string{
		"/v1/resources?prefix=%ff", "/v1/resources?prefix=a%00", "/v1/resources?after=%c3%28",
		"/v1/resources?prefix=%e2%80%ae", "/v1/events?prefix=%ff", "/v1/events?prefix=%1b",
	} {
		code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+path, "")
		if code != http.StatusBadRequest || !strings.Contains(body, "prefix") && !strings.Contains(body, "after") {
			t.Errorf("GET %s: %d %q, want 400 naming the parameter", path, code, body)
		}
	}
	if code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/v1/resources?prefix=%d1%80", ""); code != http.StatusOK {
		t.Fatalf("GET /v1/resources with a UTF-8 prefix: %d %s", code, body)
	}
}

package server

// The attacks of issue 17, each driven the way the attacker did: raw gRPC
// messages through api/dlmpb against a real in-process server.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
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
	logs := &logBuffer{}
	s := startServer(t, ServerConfig{Logger: logs.logger()})
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
		noToken(t, "the snapshot", string(snapshotBytes(t, s.Node().FSM())), tok)
	}
	if !strings.Contains(logs.String(), "resume") {
		t.Fatal("the refused resumes were not logged")
	}
}

// Item 1, token mode: any holder of the same identity could resume a
// session of that identity. The identity check stays, and the resume token
// is needed on top of it.
func TestAttackSessionTakeoverSameIdentity(t *testing.T) {
	as := startAuthServer(t, ServerConfig{})
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
	s := startServer(t, ServerConfig{})
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
	s := startServer(t, ServerConfig{})
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
	s := startServer(t, ServerConfig{})
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
	as := startAuthServer(t, ServerConfig{})
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

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/server/fsm"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// authServer is a server with tokens and rules, its tokens and its logs.
type authServer struct {
	*Server
	tok  map[string]string // identity -> token
	logs *servertest.LogBuffer
}

// The rules of the auth tests: alice locks and lists a/; bob locks and
// lists everything; ops is an admin who may list everything; carol is
// authenticated and may do nothing.
const testRules = `
# identity permission prefix
alice lock  a/
alice list  a/
bob   lock  *
bob   list  *
ops   admin *
ops   list  *
`

// startAuthServer starts an in-memory server with tokens for alice, bob,
// carol and ops and testRules, cfg's TLS if any, logging at debug level.
func startAuthServer(t *testing.T, cfg Config) *authServer {
	t.Helper()
	as := &authServer{tok: map[string]string{}, logs: &servertest.LogBuffer{}}
	var file strings.Builder
	for _, id := range []string{"alice", "bob", "carol", "ops"} {
		as.tok[id] = newToken(t)
		fmt.Fprintf(&file, "%s %s\n", id, as.tok[id])
	}
	var err error
	if cfg.Tokens, err = auth.LoadTokens(writeFile(t, "tokens", file.String())); err != nil {
		t.Fatal(err)
	}
	if cfg.Rules, err = auth.LoadRules(writeFile(t, "rules", testRules)); err != nil {
		t.Fatal(err)
	}
	cfg.Logger = as.logs.Logger()
	as.Server = startServer(t, cfg)
	t.Cleanup(func() {
		// Credentials never reach the logs, whatever the test did.
		logs := as.logs.String()
		for id, tok := range as.tok {
			if strings.Contains(logs, tok) {
				t.Errorf("the server logged %s's token", id)
			}
		}
	})
	return as
}

// session opens a session stream with token (none if "") and the open
// request first, over a plaintext connection.
func (as *authServer) session(t *testing.T, token string, open *dlmpb.OpenRequest) *rawSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := dialGRPC(t, as.Addr(), nil).Session(bearer(ctx, token))
	if err != nil {
		t.Fatal(err)
	}
	r := &rawSession{t: t, stream: st, cancel: cancel}
	// A refused stream may end before the open is sent: Send then says
	// io.EOF, and Recv gives the status.
	if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: open}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return r
}

// openAs opens a session as identity id and reads SessionOpened and
// SessionSync.
func (as *authServer) openAs(t *testing.T, id, label string) *rawSession {
	t.Helper()
	r := as.session(t, as.tok[id], &dlmpb.OpenRequest{Ttl: durationpb.New(10 * time.Second), Label: label})
	o := r.recv().GetOpened()
	if o == nil {
		t.Fatalf("%s: no SessionOpened", id)
	}
	r.sid, r.token = o.GetSession(), o.GetResumeToken()
	if r.recv().GetSync() == nil {
		t.Fatalf("%s: no SessionSync", id)
	}
	return r
}

// resources returns the names of the table's resources, read from the FSM.
func (as *authServer) resources() []string {
	var names []string
	as.Node().FSM().Read(func(v fsm.View) {
		t := v.Table()
		for _, r := range t.Resources("", 0) {
			names = append(names, r.Name)
		}
	})
	return names
}

// holder returns the session holding lock id, 0 if none does, once the
// requests taken so far are applied.
func (as *authServer) holder(id uint64) uint64 {
	if err := as.Node().Settle(context.Background()); err != nil {
		panic(err)
	}
	var sid uint64
	as.Node().FSM().Read(func(v fsm.View) {
		t := v.Table()
		if li, ok := t.Describe(locktable.LockID(id)); ok && li.State != locktable.LockWaiting {
			sid = uint64(li.Session)
		}
	})
	return sid
}

// Without a valid token, every call is Unauthenticated and changes nothing.
func TestAuthRequiresCredentials(t *testing.T) {
	as := startAuthServer(t, Config{})
	client := dialGRPC(t, as.Addr(), nil)
	ctx := context.Background()
	for name, tok := range map[string]string{"no token": "", "unknown token": newToken(t), "short token": "abc"} {
		_, err := client.List(bearer(ctx, tok), &dlmpb.ListRequest{})
		wantCode(t, err, codes.Unauthenticated, name+": List")
		_, err = client.Status(bearer(ctx, tok), &dlmpb.StatusRequest{})
		wantCode(t, err, codes.Unauthenticated, name+": Status")
		_, err = as.session(t, tok, &dlmpb.OpenRequest{Label: "intruder"}).stream.Recv()
		wantCode(t, err, codes.Unauthenticated, name+": Session")
	}
	// A malformed authorization value is refused too.
	_, err := client.List(bearerRaw(ctx, "Basic "+as.tok["alice"]), &dlmpb.ListRequest{})
	wantCode(t, err, codes.Unauthenticated, "Basic scheme")

	var sessions int
	as.Node().FSM().Read(func(v fsm.View) { t := v.Table(); sessions = t.Stats().Sessions })
	if sessions != 0 || len(as.resources()) != 0 {
		t.Fatalf("refused calls changed the table: %d sessions, resources %v", sessions, as.resources())
	}
	if !strings.Contains(as.logs.String(), "authentication failed") {
		t.Error("no authentication failure logged")
	}
}

// A lock on a name without the lock right is refused with
// PERMISSION_DENIED, on that request only: nothing changes, and the stream
// goes on serving permitted names.
func TestAuthLockNeedsLockRight(t *testing.T) {
	as := startAuthServer(t, Config{})
	alice := as.openAs(t, "alice", "alice")
	denied := alice.lock("b/secret", dlmpb.Mode_MODE_EX)
	if m := alice.refusal(denied, dlmpb.Reason_REASON_PERMISSION_DENIED); !strings.Contains(m.GetMessage(), "b/secret") {
		t.Fatalf("refusal does not name the resource: %q", m.GetMessage())
	}
	if names := as.resources(); len(names) != 0 {
		t.Fatalf("a refused lock changed the table: %v", names)
	}
	ok := alice.lock("a/job", dlmpb.Mode_MODE_EX)
	if g := alice.granted(ok); g.GetLockId() == 0 {
		t.Fatal("no lock id")
	}
	if names := as.resources(); len(names) != 1 || names[0] != "a/job" {
		t.Fatalf("resources %v, want [a/job]", names)
	}

	// carol is authenticated but has no rights: her session opens, her
	// locks are refused, and she may not list.
	carol := as.openAs(t, "carol", "carol")
	carol.refusal(carol.lock("a/job2", dlmpb.Mode_MODE_PR), dlmpb.Reason_REASON_PERMISSION_DENIED)
	_, err := dialGRPC(t, as.Addr(), nil).List(bearer(context.Background(), as.tok["carol"]), &dlmpb.ListRequest{})
	wantCode(t, err, codes.PermissionDenied, "carol's List")
	_, err = dialGRPC(t, as.Addr(), nil).Status(bearer(context.Background(), as.tok["carol"]), &dlmpb.StatusRequest{})
	wantCode(t, err, codes.PermissionDenied, "carol's Status")
	if names := as.resources(); len(names) != 1 {
		t.Fatalf("carol changed the table: %v", names)
	}
}

// List shows only the resources under the caller's list prefixes, and
// pages through them correctly.
func TestAuthListIsFiltered(t *testing.T) {
	as := startAuthServer(t, Config{})
	bob := as.openAs(t, "bob", "bob")
	for _, name := range []string{"a/1", "a/2", "a/3", "ab", "b/1", "z"} {
		bob.granted(bob.lock(name, dlmpb.Mode_MODE_PR))
	}
	client := dialGRPC(t, as.Addr(), nil)
	list := func(id string, req *dlmpb.ListRequest) ([]string, string) {
		t.Helper()
		resp, err := client.List(bearer(context.Background(), as.tok[id]), req)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		var names []string
		for _, r := range resp.GetResources() {
			names = append(names, r.GetName())
		}
		return names, resp.GetNext()
	}
	if got, _ := list("alice", &dlmpb.ListRequest{}); strings.Join(got, ",") != "a/1,a/2,a/3" {
		t.Fatalf("alice lists %v, want a/1,a/2,a/3", got)
	}
	if got, _ := list("alice", &dlmpb.ListRequest{Prefix: "b/"}); len(got) != 0 {
		t.Fatalf("alice lists %v under b/", got)
	}
	page, next := list("alice", &dlmpb.ListRequest{Limit: 2})
	if strings.Join(page, ",") != "a/1,a/2" || next != "a/2" {
		t.Fatalf("alice's first page %v next %q", page, next)
	}
	if page, _ := list("alice", &dlmpb.ListRequest{Limit: 2, After: next}); strings.Join(page, ",") != "a/3" {
		t.Fatalf("alice's second page %v", page)
	}
	if got, _ := list("bob", &dlmpb.ListRequest{}); len(got) != 6 {
		t.Fatalf("bob lists %v, want all 6", got)
	}
}

// Releases and conversions are owner-checked: another authenticated
// session with lock rights on the name cannot release or convert the
// holder's lock, nor resume the holder's session; the lock stays held.
func TestAuthReleaseAndConvertAreOwnerChecked(t *testing.T) {
	as := startAuthServer(t, Config{})
	alice := as.openAs(t, "alice", "alice")
	lockID := alice.granted(alice.lock("a/owned", dlmpb.Mode_MODE_EX)).GetLockId()

	bob := as.openAs(t, "bob", "bob") // bob may lock everything
	// Another identity's lock is answered as a missing one (issue 17 item 9).
	bob.release(lockID)
	bob.refusal(bob.seq, dlmpb.Reason_REASON_UNKNOWN_LOCK)
	bob.seq++
	bob.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: bob.sid, Seq: bob.seq}, LockId: lockID, Mode: dlmpb.Mode_MODE_NL}}})
	bob.refusal(bob.seq, dlmpb.Reason_REASON_UNKNOWN_LOCK)
	bob.refusal(bob.relabel(lockID, []byte("bob's now")), dlmpb.Reason_REASON_UNKNOWN_LOCK)
	bob.seq++
	bob.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Cancel{Cancel: &dlmpb.CancelRequest{
		Id: &dlmpb.RequestID{Session: bob.sid, Seq: bob.seq}, LockId: lockID}}})
	if m := bob.recvSkipAcks().GetRefused(); m == nil || m.GetReason() == dlmpb.Reason_REASON_UNSPECIFIED {
		t.Fatalf("bob's cancel of alice's lock: %v", m)
	}
	if got := as.holder(lockID); got != alice.sid {
		t.Fatalf("after bob's attempts, lock %d is held by session %d, want alice's %d", lockID, got, alice.sid)
	}

	// Resuming alice's session as bob is refused; alice's session is intact.
	_, err := as.session(t, as.tok["bob"], &dlmpb.OpenRequest{Session: alice.sid}).stream.Recv()
	wantCode(t, err, codes.PermissionDenied, "bob resuming alice's session")
	if got := as.holder(lockID); got != alice.sid {
		t.Fatalf("after bob's resume, lock %d is held by %d", lockID, got)
	}
	// alice herself may release it.
	alice.release(lockID)
	for m := alice.recvSkipAcks(); m.GetReleased() == nil; m = alice.recvSkipAcks() {
		if m.GetRefused() != nil {
			t.Fatalf("alice's release refused: %v", m)
		}
	}
	if got := as.holder(lockID); got != 0 {
		t.Fatalf("alice's release left the lock with %d", got)
	}
}

// A token never reaches what the server stores and shows: a label or lock
// metadata that contains the caller's token is stored without it.
func TestAuthTokenNeverStoredOrShown(t *testing.T) {
	as := startAuthServer(t, Config{})
	tok := as.tok["alice"]
	alice := as.openAs(t, "alice", "job --token "+tok)
	alice.granted(alice.lock("a/meta", dlmpb.Mode_MODE_EX, func(r *dlmpb.LockRequest) { r.Metadata = []byte("Bearer " + tok) }))
	relabeled := alice.granted(alice.lock("a/relabeled", dlmpb.Mode_MODE_EX)).GetLockId()
	seq := alice.relabel(relabeled, []byte("token "+tok))
	if m := alice.recvSkipAcks().GetRelabeled(); m == nil || m.GetId().GetSeq() != seq {
		t.Fatalf("relabel: %v", m)
	}

	client := &http.Client{}
	base := "http://" + as.HTTPAddr()
	for _, path := range []string{"/v1/sessions", "/v1/resources", "/v1/events", "/metrics", "/v1/status", "/v1/whoami"} {
		code, body := httpGet(t, client, base+path, as.tok["ops"])
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if strings.Contains(body, tok) {
			t.Fatalf("GET %s shows alice's token:\n%s", path, body)
		}
	}
	if _, body := httpGet(t, client, base+"/v1/sessions", as.tok["ops"]); !strings.Contains(body, "job --token "+redactedToken) {
		t.Fatalf("the label is not shown redacted:\n%s", body)
	}
	if _, body := httpGet(t, client, base+"/v1/resources", as.tok["ops"]); !strings.Contains(body, "token "+redactedToken) {
		t.Fatalf("the relabeled metadata is not shown redacted:\n%s", body)
	}
	snap := as.eventSnapshot("", 100, scopeOf(as.auth.Caller(auth.WithPrincipal(context.Background(), auth.NewPrincipal("ops", nil)))))
	if fmt.Sprint(snap) == "" || strings.Contains(fmt.Sprintf("%+v", snap), tok) {
		t.Fatal("the dashboard snapshot holds the token")
	}
	_, metrics := httpGet(t, client, base+"/metrics", as.tok["ops"])
	if !strings.Contains(metrics, "dlm_server_auth_refused_total") {
		t.Error("no dlm_server_auth_refused_total in /metrics")
	}
}

// bearerRaw sends an arbitrary authorization value.
func bearerRaw(ctx context.Context, v string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", v)
}

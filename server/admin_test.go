package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/locktable"

	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/raftnode"

	"google.golang.org/grpc/codes"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// The admin's session calls over HTTP: the listing pages and filters by
// owner, the kill ends sessions through the log; both need admin.
func TestAdminSessionsHTTP(t *testing.T) {
	as := startAuthServer(t, Config{})
	a1, a2 := as.openAs(t, "alice", "a1"), as.openAs(t, "alice", "a2")
	b := as.openAs(t, "bob", "b")
	base := "http://" + as.HTTPAddr()

	code, body := httpGet(t, http.DefaultClient, base+"/v1/admin/sessions?owner=alice", as.tok["alice"])
	if code != http.StatusForbidden {
		t.Fatalf("alice lists sessions: %d %s, want 403", code, body)
	}
	code, body = httpDo(t, http.DefaultClient, http.MethodPost, base+"/v1/admin/sessions/kill", as.tok["bob"], `{"owner":"alice"}`)
	if code != http.StatusForbidden {
		t.Fatalf("bob kills alice's sessions: %d %s, want 403", code, body)
	}
	for _, bad := range []string{"after=x", "limit=-1"} {
		if code, body := httpGet(t, http.DefaultClient, base+"/v1/admin/sessions?"+bad, as.tok["ops"]); code != http.StatusBadRequest {
			t.Fatalf("?%s: %d %s, want 400", bad, code, body)
		}
	}

	var page struct {
		Sessions []struct {
			ID    string `json:"id"`
			Owner string `json:"owner"`
			Label string `json:"label"`
		} `json:"sessions"`
		Next          string `json:"next"`
		OwnerSessions string `json:"owner_sessions"`
	}
	code, body = httpGet(t, http.DefaultClient, base+"/v1/admin/sessions?owner=alice&limit=1", as.tok["ops"])
	if code != http.StatusOK {
		t.Fatalf("list: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Sessions) != 1 || page.Sessions[0].Owner != "alice" || page.Sessions[0].Label != "a1" || page.Next == "0" || page.OwnerSessions != "2" {
		t.Fatalf("first page of alice's sessions: %s", body)
	}
	code, body = httpGet(t, http.DefaultClient, base+"/v1/admin/sessions?owner=alice&after="+page.Next, as.tok["ops"])
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || len(page.Sessions) != 1 || page.Sessions[0].Label != "a2" || page.Next != "0" {
		t.Fatalf("second page: %d %s", code, body)
	}

	for _, bad := range []string{`{}`, `{"owner":"alice","sessions":[1]}`, `{"owner":`, `{"who":"alice"}`} {
		if code, body := httpDo(t, http.DefaultClient, http.MethodPost, base+"/v1/admin/sessions/kill", as.tok["ops"], bad); code != http.StatusBadRequest {
			t.Fatalf("kill %s: %d %s, want 400", bad, code, body)
		}
	}
	code, body = httpDo(t, http.DefaultClient, http.MethodPost, base+"/v1/admin/sessions/kill", as.tok["ops"], `{"owner":"alice"}`)
	var killed struct {
		Sessions []string `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(body), &killed); code != http.StatusOK || err != nil || len(killed.Sessions) != 2 {
		t.Fatalf("kill alice's sessions: %d %s", code, body)
	}
	awaitExpired(a1)
	awaitExpired(a2)
	// bob's session lives on.
	b.granted(b.lock("b/x", dlmpb.Mode_MODE_EX))
}

// Without authentication anyone may list and end sessions (as anyone may
// do anything), no quota applies, and the owner of every session is "".
func TestAdminSessionsOpenMode(t *testing.T) {
	s := startServer(t, Config{Node: raftnode.Config{Quotas: fsm.Quotas{SessionsPerIdentity: 1, LocksPerIdentity: 1}}})
	r, _ := open(t, s, 0, time.Minute)
	open(t, s, 0, time.Minute)
	r.granted(r.lock("x", dlmpb.Mode_MODE_EX))
	r.granted(r.lock("y", dlmpb.Mode_MODE_EX))
	c := dialPB(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.ListSessions(ctx, &dlmpb.ListSessionsRequest{})
	if err != nil || len(resp.GetSessions()) != 2 || resp.GetSessions()[0].GetOwner() != "" || resp.GetSessions()[0].GetLockCount() != 2 {
		t.Fatalf("ListSessions: %v, %v", resp, err)
	}
	_, err = c.KillSessions(ctx, &dlmpb.KillSessionsRequest{})
	wantCode(t, err, codes.InvalidArgument, "KillSessions naming nothing")
	kr, err := c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Sessions: []uint64{r.sid, r.sid}})
	if err != nil || len(kr.GetSessions()) != 1 {
		t.Fatalf("KillSessions: %v, %v", kr, err)
	}
	awaitExpired(r)
	if kr, err := c.KillSessions(ctx, &dlmpb.KillSessionsRequest{Sessions: []uint64{r.sid}}); err != nil || len(kr.GetSessions()) != 0 {
		t.Fatalf("KillSessions of an ended session: %v, %v; want none ended", kr, err)
	}
}

// The online snapshot over HTTP needs admin; an admin gets a whole,
// checked snapshot file of the state, as of an applied index, that a
// fresh data dir starts from, and the copy is logged with its identity.
func TestAdminSnapshotHTTP(t *testing.T) {
	as := startAuthServer(t, Config{})
	as.openAs(t, "alice", "a1")
	base := "http://" + as.HTTPAddr()
	if code, body := httpGet(t, http.DefaultClient, base+"/v1/admin/snapshot", ""); code != http.StatusUnauthorized {
		t.Fatalf("snapshot without credentials: %d %s, want 401", code, body)
	}
	if code, body := httpGet(t, http.DefaultClient, base+"/v1/admin/snapshot", as.tok["alice"]); code != http.StatusForbidden {
		t.Fatalf("alice takes a snapshot: %d %s, want 403", code, body)
	}
	code, body := httpGet(t, http.DefaultClient, base+"/v1/admin/snapshot", as.tok["ops"])
	if code != http.StatusOK {
		t.Fatalf("ops takes a snapshot: %d %s", code, body)
	}
	snap, err := raftnode.ReadSnapshotFile(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Index == 0 || snap.Index > as.Node().FSM().AppliedIndex() {
		t.Fatalf("snapshot at index %d, applied %d", snap.Index, as.Node().FSM().AppliedIndex())
	}
	f := fsm.NewFSM(locktable.Limits{MaxNameLen: raftnode.DefaultMaxNameLen})
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap.State))); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Sessions()); n != 1 {
		t.Fatalf("the snapshot holds %d sessions, want alice's one", n)
	}
	if logs := as.logs.String(); !strings.Contains(logs, "state copied by an administrator") || !strings.Contains(logs, "identity=ops") {
		t.Fatalf("the copy is not logged with its identity:\n%s", logs)
	}
	// A damaged copy is refused.
	bad := []byte(body)
	bad[len(bad)/2] ^= 1
	if _, err := raftnode.ReadSnapshotFile(bytes.NewReader(bad)); !errors.Is(err, raftnode.ErrBadSnapshotFile) {
		t.Fatalf("a damaged copy: %v", err)
	}
}

package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dlmhq/dlm/server/httpapi"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Over HTTP: 401 without credentials, 403 without the right, filtered
// listings, admin-only membership, and the health endpoints and dashboard
// files open to all.
func TestHTTPAuth(t *testing.T) {
	as := startAuthServer(t, Config{})
	bob := as.openAs(t, "bob", "bob-label")
	for _, name := range []string{"a/1", "b/1"} {
		bob.granted(bob.lock(name, dlmpb.Mode_MODE_EX))
	}
	client := &http.Client{}
	base := "http://" + as.HTTPAddr()

	for _, path := range []string{"/healthz", "/readyz", "/", "/app.js"} {
		if code, body := httpGet(t, client, base+path, ""); code != http.StatusOK {
			t.Errorf("GET %s without credentials: %d %s", path, code, body)
		}
	}
	protected := []string{"/v1/resources", "/v1/sessions", "/v1/status", "/v1/events", "/metrics", "/v1/members", "/v1/whoami"}
	for _, path := range protected {
		for name, tok := range map[string]string{"no token": "", "unknown token": newToken(t)} {
			if code, _ := httpGet(t, client, base+path, tok); code != http.StatusUnauthorized {
				t.Errorf("GET %s, %s: %d, want 401", path, name, code)
			}
		}
	}
	for _, path := range []string{"/v1/resources", "/v1/sessions", "/v1/status", "/v1/events", "/metrics", "/v1/members"} {
		if code, _ := httpGet(t, client, base+path, as.tok["carol"]); code != http.StatusForbidden {
			t.Errorf("GET %s as carol (no rights): %d, want 403", path, code)
		}
	}

	// alice sees a/ only, and not the members.
	code, body := httpGet(t, client, base+"/v1/resources", as.tok["alice"])
	if code != http.StatusOK || !strings.Contains(body, `"a/1"`) || strings.Contains(body, `"b/1"`) {
		t.Fatalf("alice's /v1/resources: %d\n%s", code, body)
	}
	code, body = httpGet(t, client, base+"/v1/sessions", as.tok["alice"])
	if code != http.StatusOK || !strings.Contains(body, `"a/1"`) || strings.Contains(body, `"b/1"`) {
		t.Fatalf("alice's /v1/sessions: %d\n%s", code, body)
	}
	code, body = httpGet(t, client, base+"/v1/events", as.tok["alice"])
	snap := eventOf(t, body)
	if code != http.StatusOK || len(snap.Resources) != 1 || snap.Resources[0].Name != "a/1" || !snap.MembersHidden || len(snap.Members) != 0 {
		t.Fatalf("alice's /v1/events: %d %+v", code, snap)
	}
	if code, _ := httpGet(t, client, base+"/v1/members", as.tok["alice"]); code != http.StatusForbidden {
		t.Fatalf("alice's /v1/members: %d, want 403", code)
	}
	var who httpapi.Whoami
	if _, body := httpGet(t, client, base+"/v1/whoami", as.tok["alice"]); json.Unmarshal([]byte(body), &who) != nil ||
		who.Identity != "alice" || !who.Auth || strings.Join(who.List, ",") != "a/" || who.Admin {
		t.Fatalf("alice's /v1/whoami: %s", body)
	}

	// Membership changes need admin; a refused one changes nothing.
	for _, id := range []string{"alice", "bob"} {
		if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/cluster/remove", as.tok[id], `{"id":"node-1"}`); code != http.StatusForbidden {
			t.Fatalf("%s removing node-1: %d, want 403", id, code)
		}
		if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/cluster/join", as.tok[id], `{"id":"node-9","raft_addr":"127.0.0.1:1"}`); code != http.StatusForbidden {
			t.Fatalf("%s joining node-9: %d, want 403", id, code)
		}
	}
	if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/cluster/remove", "", `{"id":"node-1"}`); code != http.StatusUnauthorized {
		t.Fatalf("anonymous remove: %d, want 401", code)
	}
	code, body = httpGet(t, client, base+"/v1/members", as.tok["ops"])
	if code != http.StatusOK || !strings.Contains(body, `"node-1"`) || !as.Ready() {
		t.Fatalf("ops's /v1/members: %d %s", code, body)
	}
	code, body = httpGet(t, client, base+"/v1/events", as.tok["ops"])
	if snap := eventOf(t, body); code != http.StatusOK || len(snap.Members) != 1 || snap.MembersHidden || len(snap.Resources) != 2 {
		t.Fatalf("ops's /v1/events: %d %+v", code, snap)
	}
}

// The dashboard's login: POST /v1/login trades a bearer token for an
// HttpOnly, SameSite=Strict cookie that holds no token; GET requests
// (the feed) may use it, POST requests may not; logout ends it.
func TestHTTPLoginCookie(t *testing.T) {
	as := startAuthServer(t, Config{})
	client := &http.Client{}
	base := "http://" + as.HTTPAddr()

	for name, tok := range map[string]string{"no token": "", "unknown token": newToken(t)} {
		if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/login", tok, ""); code != http.StatusUnauthorized {
			t.Fatalf("login with %s: %d, want 401", name, code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/login", nil)
	req.Header.Set("Authorization", "Bearer "+as.tok["ops"])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusNoContent || len(cookies) != 1 {
		t.Fatalf("login: %s, cookies %v", resp.Status, cookies)
	}
	c := cookies[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 {
		t.Fatalf("login cookie attributes: %+v", c)
	}
	if strings.Contains(c.Value, as.tok["ops"]) || len(c.Value) < 40 {
		t.Fatalf("login cookie value %q: not a random login id", c.Value)
	}

	code, body := httpGet(t, client, base+"/v1/events", "", c)
	if snap := eventOf(t, body); code != http.StatusOK || len(snap.Members) != 1 {
		t.Fatalf("the feed with the login cookie: %d %+v", code, snap)
	}
	if code, body := httpGet(t, client, base+"/v1/whoami", "", c); code != http.StatusOK || !strings.Contains(body, `"ops"`) {
		t.Fatalf("whoami with the cookie: %d %s", code, body)
	}
	// No state-changing request rides on the cookie.
	if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/cluster/remove", "", `{"id":"node-9"}`, c); code != http.StatusUnauthorized {
		t.Fatalf("remove with the cookie alone: %d, want 401", code)
	}
	// A forged cookie is worth nothing.
	if code, _ := httpGet(t, client, base+"/v1/whoami", "", &http.Cookie{Name: c.Name, Value: as.tok["ops"]}); code != http.StatusUnauthorized {
		t.Fatalf("a cookie holding the token: %d, want 401", code)
	}
	if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/logout", "", "", c); code != http.StatusNoContent {
		t.Fatalf("logout: %d", code)
	}
	if code, _ := httpGet(t, client, base+"/v1/whoami", "", c); code != http.StatusUnauthorized {
		t.Fatalf("whoami after logout: %d, want 401", code)
	}
}

// Without authentication the HTTP API is open, as it always was.
func TestHTTPOpenWithoutAuth(t *testing.T) {
	s := startServer(t, Config{})
	client := &http.Client{}
	for _, path := range []string{"/v1/resources", "/v1/sessions", "/v1/status", "/v1/members", "/metrics", "/v1/whoami"} {
		if code, body := httpGet(t, client, "http://"+s.HTTPAddr()+path, ""); code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	if code, _ := httpDo(t, client, http.MethodPost, "http://"+s.HTTPAddr()+"/v1/login", "", ""); code != http.StatusNoContent {
		t.Fatalf("login without authentication: %d", code)
	}
}

// eventOf decodes the first snapshot of an event stream.
func eventOf(t *testing.T, body string) *dlmpb.EventSnapshot {
	t.Helper()
	snap := new(dlmpb.EventSnapshot)
	_, data, ok := strings.Cut(body, "\ndata: ")
	if !ok {
		t.Fatalf("no event in %q", body)
	}
	data, _, _ = strings.Cut(data, "\n")
	if err := protojson.Unmarshal([]byte(data), snap); err != nil {
		t.Fatalf("event %q: %v", data, err)
	}
	return snap
}

// Go's profiles are served only with Config.Pprof, and then only to
// admins when authentication is on.
func TestHTTPPprof(t *testing.T) {
	client := &http.Client{}
	off := startServer(t, Config{})
	if code, _ := httpGet(t, client, "http://"+off.HTTPAddr()+"/debug/pprof/", ""); code != http.StatusNotFound {
		t.Fatalf("GET /debug/pprof/ without Pprof: %d, want 404", code)
	}
	as := startAuthServer(t, Config{Pprof: true})
	base := "http://" + as.HTTPAddr() + "/debug/pprof/"
	if code, _ := httpGet(t, client, base, ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /debug/pprof/ without credentials: %d, want 401", code)
	}
	if code, _ := httpGet(t, client, base, as.tok["alice"]); code != http.StatusForbidden {
		t.Fatalf("GET /debug/pprof/ as alice (no admin): %d, want 403", code)
	}
	if code, body := httpGet(t, client, base+"goroutine?debug=1", as.tok["ops"]); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("GET /debug/pprof/goroutine as ops (admin): %d\n%.200s", code, body)
	}
}

package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// postJSON calls method of the unary API as JSON over HTTP/1.1 and returns
// the status, the body decoded, and the dlm-reason header.
func postJSON(t *testing.T, s *Server, token, method, body string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr()+"/dlm.v1.Locks/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %d %q is not JSON: %v", method, resp.StatusCode, b, err)
	}
	return resp.StatusCode, m, resp.Header.Get(ReasonHeader)
}

func TestJSONLockCycle(t *testing.T) {
	s := startServer(t, Config{})
	code, open, _ := postJSON(t, s, "", "OpenSession", `{"ttl": "10s", "label": "curl"}`)
	h, _ := open["session"].(string)
	if code != 200 || h == "" || open["ttl"] != "10s" || open["session_id"] == "" {
		t.Fatalf("open: %d %v", code, open)
	}
	code, got, _ := postJSON(t, s, "", "Acquire", fmt.Sprintf(`{"session": %q, "resource": "orders/42", "wait": "5s"}`, h))
	if code != 200 || got["outcome"] != "OUTCOME_GRANTED" || got["mode"] != "MODE_EX" || got["token"] == "0" {
		t.Fatalf("acquire: %d %v", code, got)
	}
	lock, token := got["lock_id"].(string), got["token"].(string)
	// A try-lock of another session times out at once.
	_, other, _ := postJSON(t, s, "", "OpenSession", `{}`)
	code, got, _ = postJSON(t, s, "", "Acquire", fmt.Sprintf(`{"session": %q, "resource": "orders/42", "wait": "0s"}`, other["session"]))
	if code != 200 || got["outcome"] != "OUTCOME_TIMED_OUT" {
		t.Fatalf("try-lock: %d %v", code, got)
	}
	code, got, _ = postJSON(t, s, "", "KeepAlive", fmt.Sprintf(`{"session": %q}`, h))
	if code != 200 || got["ttl"] != "10s" {
		t.Fatalf("keepalive: %d %v", code, got)
	}
	code, got, _ = postJSON(t, s, "", "Release", fmt.Sprintf(`{"session": %q, "lock_id": %q}`, h, lock))
	if code != 200 || got["token"] != token {
		t.Fatalf("release: %d %v", code, got)
	}
	code, got, _ = postJSON(t, s, "", "CloseSession", fmt.Sprintf(`{"session": %q}`, h))
	if code != 200 {
		t.Fatalf("close: %d %v", code, got)
	}
	code, got, reason := postJSON(t, s, "", "KeepAlive", fmt.Sprintf(`{"session": %q}`, h))
	if code != 404 || got["code"] != "not_found" || reason != "REASON_UNKNOWN_SESSION" || !strings.Contains(got["message"].(string), "locks are lost") {
		t.Fatalf("keepalive after close: %d %v %q", code, got, reason)
	}
}

func TestJSONBadInput(t *testing.T) {
	s := startServer(t, Config{})
	_, open, _ := postJSON(t, s, "", "OpenSession", `{}`)
	h := open["session"].(string)
	for _, tc := range []struct{ what, method, body, want string }{
		{"empty name", "Acquire", fmt.Sprintf(`{"session": %q, "resource": ""}`, h), "resource name is empty"},
		{"huge name", "Acquire", fmt.Sprintf(`{"session": %q, "resource": %q}`, h, strings.Repeat("n", 1000)), "512"},
		{"unknown mode number", "Acquire", fmt.Sprintf(`{"session": %q, "resource": "r", "mode": 9}`, h), "want 1 (NL) to 6 (EX)"},
		{"unknown mode name", "Acquire", fmt.Sprintf(`{"session": %q, "resource": "r", "mode": "MODE_XX"}`, h), "MODE_XX"},
		{"ttl 0", "OpenSession", `{"ttl": "0s"}`, "outside"},
		{"misspelt field", "Acquire", fmt.Sprintf(`{"session": %q, "resorce": "r"}`, h), "resorce"},
		{"not JSON", "Acquire", `{`, "unmarshal"},
		{"no session", "Acquire", `{"resource": "r"}`, "no session"},
	} {
		code, got, _ := postJSON(t, s, "", tc.method, tc.body)
		if code != 400 || got["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(got["message"]), tc.want) {
			t.Errorf("%s: %d %v, want 400 invalid_argument saying %q", tc.what, code, got, tc.want)
		}
	}
}

func TestJSONAuthentication(t *testing.T) {
	as := startAuthServer(t, Config{})
	code, got, _ := postJSON(t, as.Server, "", "OpenSession", `{}`)
	if code != 401 || got["code"] != "unauthenticated" {
		t.Fatalf("no token: %d %v", code, got)
	}
	code, got, _ = postJSON(t, as.Server, "wrong", "OpenSession", `{}`)
	if code != 401 || got["code"] != "unauthenticated" {
		t.Fatalf("wrong token: %d %v", code, got)
	}
	code, got, _ = postJSON(t, as.Server, as.tok["alice"], "OpenSession", `{}`)
	if code != 200 {
		t.Fatalf("alice: %d %v", code, got)
	}
	code, got, reason := postJSON(t, as.Server, as.tok["alice"], "Acquire", fmt.Sprintf(`{"session": %q, "resource": "b/1"}`, got["session"]))
	if code != 403 || got["code"] != "permission_denied" || reason != "REASON_PERMISSION_DENIED" {
		t.Fatalf("alice outside her prefix: %d %v %q", code, got, reason)
	}
}

// A waiter whose HTTP/1.1 connection closes leaves nothing queued.
func TestJSONHangUpLeavesNoWaiter(t *testing.T) {
	s := startServer(t, Config{})
	ctx := testCtx(t)
	_, a, _ := postJSON(t, s, "", "OpenSession", `{}`)
	_, b, _ := postJSON(t, s, "", "OpenSession", `{}`)
	if code, got, _ := postJSON(t, s, "", "Acquire", fmt.Sprintf(`{"session": %q, "resource": "r"}`, a["session"])); code != 200 {
		t.Fatalf("acquire: %d %v", code, got)
	}
	conn, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"session": %q, "resource": "r", "wait": "60s"}`, b["session"])
	fmt.Fprintf(conn, "POST /dlm.v1.Locks/Acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitFor(t, ctx, "waiter queued", func() bool { return waiters(t, s, "r") == 1 })
	conn.Close()
	waitFor(t, ctx, "waiter withdrawn", func() bool { return waiters(t, s, "r") == 0 })
}

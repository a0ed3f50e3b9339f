package server

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A feed opened with the login cookie ends when the login does (logout
// here; expiry likewise): a cookie is good for 8 hours at most, not for as
// long as one of its streams stays open.
func TestHTTPLoginFeedEndsWithLogin(t *testing.T) {
	as := startAuthServer(t, Config{})
	client := &http.Client{}
	base := "http://" + as.HTTPAddr()

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/login", nil)
	req.Header.Set("Authorization", "Bearer "+as.tok["ops"])
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(resp.Cookies()) != 1 {
		t.Fatalf("login: %s, cookies %v", resp.Status, resp.Cookies())
	}
	cookie := resp.Cookies()[0]

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	feedReq, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events", nil)
	feedReq.AddCookie(cookie)
	feed, err := client.Do(feedReq)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Body.Close()
	if feed.StatusCode != http.StatusOK {
		t.Fatalf("feed with the cookie: %s", feed.Status)
	}
	lines := bufio.NewScanner(feed.Body)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "data: ") {
	}

	if code, _ := httpDo(t, client, http.MethodPost, base+"/v1/logout", "", "", cookie); code != http.StatusNoContent {
		t.Fatalf("logout: %d", code)
	}
	// The stream must end soon after (it sends at least one event a
	// second while it lasts).
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for lines.Scan() {
		}
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the feed opened with the login cookie still streams after logout")
	}
}

// A release, conversion or cancel of a lock id that is not the session's
// (0 included) is answered by the table, whatever the caller's rights: the
// permission check applies to the session's own locks only.
func TestAuthUnknownLockIsNotPermissionDenied(t *testing.T) {
	as := startAuthServer(t, Config{})
	alice := as.openAs(t, "alice", "alice")
	for _, id := range []uint64{0, 987654} {
		alice.release(id)
		m := alice.recvSkipAcks().GetRefused()
		if m == nil || m.GetReason() == dlmpb.Reason_REASON_PERMISSION_DENIED {
			t.Fatalf("release of lock %d: %v, want the table's refusal", id, m)
		}
	}
}

// LoadTLS and LoadRaftTLS do not depend on tls.X509KeyPair filling in the
// certificate's Leaf (GODEBUG=x509keypairleaf=0 turns that off): they
// fail or succeed, never panic.
func TestLoadTLSWithoutParsedLeaf(t *testing.T) {
	t.Setenv("GODEBUG", "x509keypairleaf=0")
	pki := servertest.NewPKI(t)
	if c := pki.ServerTLS(t, true); c.Certificates[0].Leaf == nil {
		t.Fatal("no leaf")
	}
	pki.RaftTLS(t, "node-1")
}

package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/auth"
)

// A refusal of the credentials is final and says which; a member that is
// not the leader sends the call to the one it names.
func TestMembershipCallAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var calls atomic.Int32
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error": "identity x may not change the membership"}`))
	}))
	defer refuse.Close()
	err := Remove(ctx, strings.TrimPrefix(refuse.URL, "http://"), "node-2")
	if !errors.Is(err, auth.ErrPermissionDenied) || !strings.Contains(err.Error(), "may not change") || calls.Load() != 1 {
		t.Fatalf("Remove refused: %v after %d calls, want one call and ErrPermissionDenied with the reason", err, calls.Load())
	}

	var removed atomic.Value
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		removed.Store(r.URL.Path)
		w.Write([]byte(`{"ok": true}`))
	}))
	defer leader.Close()
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error": "this node is not the leader", "leader": "` + strings.TrimPrefix(leader.URL, "http://") + `"}`))
	}))
	defer follower.Close()
	if err := Remove(ctx, strings.TrimPrefix(follower.URL, "http://"), "node-2"); err != nil {
		t.Fatal(err)
	}
	if got := removed.Load(); got != "/v1/cluster/remove" {
		t.Fatalf("the leader was asked %v", got)
	}

	if err := Remove(ctx, "127.0.0.1:1", "node-2", WithToken("a-token-of-some-length")); err == nil || !strings.Contains(err.Error(), "only sent over TLS") {
		t.Fatalf("a token without TLS: %v", err)
	}
}

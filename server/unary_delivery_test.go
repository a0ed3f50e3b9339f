package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// grantedCount returns how many locks resource name has granted.
func grantedCount(t *testing.T, s *Server, name string) int {
	t.Helper()
	if err := s.Node().Settle(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := s.List(context.Background(), &dlmpb.ListRequest{Prefix: name, Exact: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, res := range r.GetResources() {
		n += len(res.GetHolders())
	}
	return n
}

// An Acquire whose caller is gone when it is granted is answered with the
// context's error and its lock is released: never a grant and a
// withdrawal both.
func TestUnaryGoneCallerIsNotAnsweredAGrant(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a := openUnary(t, ctx, c, time.Minute)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	resp, err := unary{s: s}.Acquire(gone, &dlmpb.AcquireRequest{Session: a, Resource: "r"})
	wantCode(t, err, codes.Canceled, fmt.Sprintf("an acquisition whose caller is gone (answered %v)", resp))
	if n := grantedCount(t, s, "r"); n != 0 {
		t.Fatalf("%d holders of r after the gone caller's acquisition, want 0", n)
	}
}

// brokenWriter is an HTTP response whose connection has failed: the
// handler's writes are taken, the flush to the client fails.
type brokenWriter struct{ h http.Header }

func (w *brokenWriter) Header() http.Header         { return w.h }
func (w *brokenWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *brokenWriter) WriteHeader(int)             {}
func (w *brokenWriter) FlushError() error           { return errors.New("write: connection reset by peer") }

// A JSON Acquire granted whose answer cannot be written to the client is
// withdrawn; a retry with the same request_id hears that the lock is gone.
func TestJSONGrantNotDeliveredIsWithdrawn(t *testing.T) {
	s := startServer(t, Config{})
	_, a, _ := postJSON(t, s, "", "OpenSession", `{}`)
	_, h := s.locksHTTP()
	body := fmt.Sprintf(`{"session": %q, "resource": "r", "request_id": "k1"}`, a["session"])
	req := httptest.NewRequest(http.MethodPost, "/dlm.v1.Locks/Acquire", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(&brokenWriter{h: http.Header{}}, req)
	if n := grantedCount(t, s, "r"); n != 0 {
		t.Fatalf("%d holders of r after a grant that did not reach the client, want 0", n)
	}
	code, got, reason := postJSON(t, s, "", "Acquire", body)
	if code == http.StatusOK || reason != dlmpb.Reason_REASON_UNKNOWN_LOCK.String() {
		t.Fatalf("the retry after the undelivered grant: %d %v %q, want REASON_UNKNOWN_LOCK", code, got, reason)
	}
	// Delivered, a grant stays.
	code, got, _ = postJSON(t, s, "", "Acquire", strings.Replace(body, "k1", "k2", 1))
	if code != http.StatusOK || got["outcome"] != "OUTCOME_GRANTED" || grantedCount(t, s, "r") != 1 {
		t.Fatalf("a delivered grant: %d %v, %d holders", code, got, grantedCount(t, s, "r"))
	}
}

// A gRPC Acquire granted whose answer could not be sent is withdrawn,
// unless a retry of the same request id was answered the grant meanwhile.
func TestGRPCGrantNotDeliveredIsWithdrawn(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a := openUnary(t, ctx, c, time.Minute)
	u := unary{s: s}
	call := func(key string) (context.Context, *dlmpb.AcquireResponse) {
		t.Helper()
		cctx := deliveryStats{}.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: "/dlm.v1.Locks/Acquire"})
		resp, err := u.Acquire(cctx, &dlmpb.AcquireRequest{Session: a, Resource: "r", RequestId: key})
		if err != nil || resp.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED {
			t.Fatalf("acquire %s: %v, %v", key, resp, err)
		}
		return cctx, resp
	}
	failed := &stats.End{Error: errors.New("transport is closing")}

	first, _ := call("k1")
	deliveryStats{}.HandleRPC(first, failed)
	if n := grantedCount(t, s, "r"); n != 0 {
		t.Fatalf("%d holders of r after an undelivered grant, want 0", n)
	}

	// Two calls answered the same grant (a retry); the first's answer is
	// lost, the retry's stands.
	first, r1 := call("k2")
	retry, r2 := call("k2")
	if r1.GetLockId() != r2.GetLockId() {
		t.Fatalf("the retry was answered lock %d, the call lock %d", r2.GetLockId(), r1.GetLockId())
	}
	deliveryStats{}.HandleRPC(first, failed)
	deliveryStats{}.HandleRPC(retry, &stats.End{})
	if n := grantedCount(t, s, "r"); n != 1 {
		t.Fatalf("%d holders of r after the retry's answer, want 1", n)
	}
}

package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A release of a granted lock nobody waits for is answered early, once:
// the answer the state machine gives when it applies the release is not
// sent again. A release with a waiter is answered when applied, and the
// waiter is granted with a greater token.
func TestReleaseAnsweredEarlyOnce(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	early := func(want int) {
		t.Helper()
		code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+"/metrics", "")
		if line := fmt.Sprintf("dlm_server_releases_answered_early_total %d\n", want); code != http.StatusOK || !strings.Contains(body, line) {
			t.Fatalf("/metrics: want %q", line)
		}
	}
	released := func(g *dlmpb.Granted) {
		t.Helper()
		rel := a.recvSkipAcks().GetReleased()
		if rel.GetId().GetSeq() != a.seq || rel.GetLockId() != g.GetLockId() || rel.GetToken() != g.GetToken() {
			t.Fatalf("release answered %v, want lock %d, token %d, request %d", rel, g.GetLockId(), g.GetToken(), a.seq)
		}
	}

	g := a.granted(a.lock("r", dlmpb.Mode_MODE_EX))
	a.release(g.GetLockId())
	released(g)
	early(1)
	// The next message a gets answers its next request: no second Released.
	g = a.granted(a.lock("r", dlmpb.Mode_MODE_EX))
	b.queued(b.lock("r", dlmpb.Mode_MODE_EX))
	a.release(g.GetLockId())
	released(g)
	if bg := b.granted(0); bg.GetToken() <= g.GetToken() {
		t.Fatalf("the waiter's token %d is not above the releaser's %d", bg.GetToken(), g.GetToken())
	}
	early(1)
	next := a.lock("other", dlmpb.Mode_MODE_EX)
	if m := a.recvSkipAcks(); m.GetGranted().GetId().GetSeq() != next {
		t.Fatalf("after the release's answer, got %v; want the grant of request %d", m, next)
	}
}

// A release sent right behind a conversion of the same lock is answered
// after the conversion: the release is never answered early while a
// request of the stream naming its lock is in flight.
func TestReleaseBehindConversionKeepsOrder(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	for i := range 20 {
		g := a.granted(a.lock("c", dlmpb.Mode_MODE_PR))
		conv := a.convert(g.GetLockId(), dlmpb.Mode_MODE_EX)
		a.release(g.GetLockId())
		if m := a.recvSkipAcks(); m.GetGranted().GetId().GetSeq() != conv || !m.GetGranted().GetConversion() {
			t.Fatalf("round %d: first answer %v, want the conversion's grant (request %d)", i, m, conv)
		}
		if m := a.recvSkipAcks(); m.GetReleased().GetId().GetSeq() != a.seq {
			t.Fatalf("round %d: second answer %v, want the release (request %d)", i, m, a.seq)
		}
	}
}

// A release that is not new (a retry of an applied request, or a sequence
// number below the session's highest) is never answered early: it gets
// what the state machine says.
func TestReleaseNotNewIsNotEarly(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	g := a.granted(a.lock("x", dlmpb.Mode_MODE_EX))
	a.granted(a.lock("y", dlmpb.Mode_MODE_EX))
	a.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{
		Id: &dlmpb.RequestID{Session: a.sid, Seq: 1}, LockId: g.GetLockId()}}}) // seq 1 was the lock of x
	a.refusal(1, dlmpb.Reason_REASON_REQUEST_ID_REUSED)
	if h := s.mustList(t, "x").GetHolders(); len(h) != 1 {
		t.Fatalf("holders of x after a refused release: %v", h)
	}
}

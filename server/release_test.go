package server

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
)

// A release is answered once it is applied, never before: when its answer
// arrives, the node's applied state no longer has the lock (a leader that
// dies before the entry commits can no longer undo a release its client
// was told of). A release with a waiter hands the lock on with a greater
// token, and every request is answered once.
func TestReleaseAnsweredOnceApplied(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	released := func(g *dlmpb.Granted) {
		t.Helper()
		rel := a.recvSkipAcks().GetReleased()
		if rel.GetId().GetSeq() != a.seq || rel.GetLockId() != g.GetLockId() || rel.GetToken() != g.GetToken() {
			t.Fatalf("release answered %v, want lock %d, token %d, request %d", rel, g.GetLockId(), g.GetToken(), a.seq)
		}
		var held bool
		s.Node().FSM().Read(func(v fsm.View) { _, held = v.Table().Describe(locktable.LockID(g.GetLockId())) })
		if held {
			t.Fatalf("lock %d answered released while the applied state still holds it", g.GetLockId())
		}
	}
	for range 20 {
		g := a.granted(a.lock("r", dlmpb.Mode_MODE_EX))
		a.release(g.GetLockId())
		released(g)
	}
	g := a.granted(a.lock("r", dlmpb.Mode_MODE_EX))
	b.queued(b.lock("r", dlmpb.Mode_MODE_EX))
	a.release(g.GetLockId())
	released(g)
	if bg := b.granted(0); bg.GetToken() <= g.GetToken() {
		t.Fatalf("the waiter's token %d is not above the releaser's %d", bg.GetToken(), g.GetToken())
	}
	next := a.lock("other", dlmpb.Mode_MODE_EX)
	if m := a.recvSkipAcks(); m.GetGranted().GetId().GetSeq() != next {
		t.Fatalf("after the release's answer, got %v; want the grant of request %d", m, next)
	}
}

// A release sent right behind a conversion of the same lock is answered
// after the conversion.
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

// A release under a sequence number the session used for another request
// is refused and changes nothing.
func TestReleaseUnderAReusedIDIsRefused(t *testing.T) {
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

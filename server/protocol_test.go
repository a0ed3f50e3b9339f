package server

// Tests of the session protocol as other clients than ours speak it: the
// server-side wait of lock and convert requests (which the Go client does
// not use), and the lease TTL field that is gone from it.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// convertWait sends a conversion of lock to mode with wait and returns its seq.
func (r *rawSession) convertWait(lock uint64, mode dlmpb.Mode, wait *durationpb.Duration) uint64 {
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: lock, Mode: mode, Wait: wait}}})
	return r.seq
}

// queued expects a Queued for request seq.
func (r *rawSession) queued(seq uint64) *dlmpb.Queued {
	r.t.Helper()
	m := r.recvSkipAcks()
	q := m.GetQueued()
	if q == nil || q.GetId().GetSeq() != seq {
		r.t.Fatalf("want Queued for request %d, got %v", seq, m)
	}
	return q
}

// timedOut expects a TimedOut of lock in mode.
func (r *rawSession) timedOut(lock uint64, mode dlmpb.Mode, conversion bool) {
	r.t.Helper()
	m := r.recvSkipAcks()
	to := m.GetTimedOut()
	if to == nil || to.GetLockId() != lock || to.GetMode() != mode || to.GetConversion() != conversion {
		r.t.Fatalf("want TimedOut of lock %d in %v (conversion %v), got %v", lock, mode, conversion, m)
	}
}

// A lock request or conversion with a wait, as a client other than ours
// may send it: a zero wait is refused at once (WOULD_BLOCK) and queues
// nothing; a wait that runs out is answered Queued, then TimedOut, and
// leaves no waiter: the request's lock is gone, and a conversion leaves the
// lock granted in its old mode.
func TestStreamWaitRunsOut(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	a.granted(a.lock("w", dlmpb.Mode_MODE_EX))

	zero := func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(0) }
	b.refusal(b.lock("w", dlmpb.Mode_MODE_EX, zero), dlmpb.Reason_REASON_WOULD_BLOCK)
	if w := s.mustList(t, "w").GetWaiting(); len(w) != 0 {
		t.Fatalf("a zero wait left waiters %v", w)
	}

	short := func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(30 * time.Millisecond) }
	q := b.queued(b.lock("w", dlmpb.Mode_MODE_EX, short))
	b.timedOut(q.GetLockId(), dlmpb.Mode_MODE_EX, false)
	if w := s.mustList(t, "w").GetWaiting(); len(w) != 0 {
		t.Fatalf("a wait that ran out left waiters %v", w)
	}
	b.release(q.GetLockId())
	b.refusal(b.seq, dlmpb.Reason_REASON_UNKNOWN_LOCK)

	// A conversion that runs out: the lock stays granted in PR.
	a.granted(a.lock("v", dlmpb.Mode_MODE_PR))
	g := b.granted(b.lock("v", dlmpb.Mode_MODE_PR))
	b.refusal(b.convertWait(g.GetLockId(), dlmpb.Mode_MODE_EX, durationpb.New(0)), dlmpb.Reason_REASON_WOULD_BLOCK)
	cq := b.queued(b.convertWait(g.GetLockId(), dlmpb.Mode_MODE_EX, durationpb.New(30*time.Millisecond)))
	if !cq.GetConversion() || cq.GetLockId() != g.GetLockId() {
		t.Fatalf("conversion queued as %v", cq)
	}
	b.timedOut(g.GetLockId(), dlmpb.Mode_MODE_EX, true)
	v := s.mustList(t, "v")
	if len(v.GetConverting()) != 0 || len(v.GetWaiting()) != 0 {
		t.Fatalf("a conversion that ran out left %v converting, %v waiting", v.GetConverting(), v.GetWaiting())
	}
	held := false
	for _, h := range v.GetHolders() {
		if h.GetLockId() == g.GetLockId() {
			held = h.GetMode() == dlmpb.Mode_MODE_PR && h.GetState() == dlmpb.LockInfo_STATE_GRANTED
		}
	}
	if !held {
		t.Fatalf("after its conversion ran out, lock %d is not granted in PR: %v", g.GetLockId(), v.GetHolders())
	}
	if st, err := s.Status(context.Background(), nil); err != nil || st.GetPending() != 0 {
		t.Fatalf("status %v, %v: want no request pending", st, err)
	}
}

// The lease TTL of lock requests (field 7) is gone from the protocol: its
// number and name are reserved, and a request from an older client that
// still sends one, even out of the bounds the server used to check, is
// served as if it had none.
func TestOldClientTTLIgnored(t *testing.T) {
	d := (&dlmpb.LockRequest{}).ProtoReflect().Descriptor()
	if d.Fields().ByNumber(7) != nil || !d.ReservedRanges().Has(7) || !d.ReservedNames().Has("ttl") {
		t.Fatal("LockRequest field 7 (ttl) is not reserved")
	}
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, time.Minute)
	for i, ttl := range []*durationpb.Duration{durationpb.New(time.Millisecond), durationpb.New(48 * time.Hour), {Seconds: 1, Nanos: -1}} {
		g := r.granted(r.lock(fmt.Sprint("old/", i), dlmpb.Mode_MODE_EX, servertest.OldTTL(ttl)))
		r.release(g.GetLockId())
		if rel := r.recvSkipAcks().GetReleased(); rel.GetLockId() != g.GetLockId() {
			t.Fatalf("release of %d answered %v", g.GetLockId(), rel)
		}
	}
}

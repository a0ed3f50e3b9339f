package server

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
)

// silences returns the silences of a checkpoint, by session.
func silences(l *liveness, now time.Time) (map[locktable.SessionID]time.Duration, []func(bool), time.Time) {
	cmd, acks, next := l.checkpoint(now)
	out := make(map[locktable.SessionID]time.Duration)
	for _, e := range cmd.GetSessions() {
		out[locktable.SessionID(e.GetSession())] = time.Duration(e.GetSilentNanos())
	}
	return out, acks, next
}

// A new leader starts a session the log records from its silence and the
// time since it applied the record, with no margin, a session recorded
// unheard by an earlier promotion included; the sessions its own promotion
// recorded unheard, and those with no record, get their TTL and the
// margin.
func TestLivenessPromotionStartsFromTheRecordedSilence(t *testing.T) {
	const ttl, margin = 8 * time.Second, time.Second
	l := newLiveness()
	now := time.Now()
	since := now.Add(-time.Millisecond) // this leader's promotion
	l.activate([]fsm.SessionMeta{{ID: 1, TTL: ttl},
		{ID: 2, TTL: ttl, Recorded: true, Silent: 3 * time.Second, SilentAt: now},
		{ID: 3, TTL: ttl, Recorded: true, Silent: 9 * time.Second, SilentAt: now},
		// Applied 2 s before the promotion (the election, say): those
		// 2 s of silence count too.
		{ID: 4, TTL: ttl, Recorded: true, Silent: 3 * time.Second, SilentAt: now.Add(-2 * time.Second)},
		// Recorded unheard by a leader that served 3 s ago, too briefly
		// to record anything of its own.
		{ID: 5, TTL: ttl, Recorded: true, SilentAt: now.Add(-3 * time.Second)},
		// Recorded unheard by this leader's promotion.
		{ID: 6, TTL: ttl, Recorded: true, SilentAt: since.Add(time.Microsecond)},
	}, now, since, margin)
	for sid, want := range map[locktable.SessionID]time.Time{1: now.Add(ttl + margin), 2: now.Add(5 * time.Second), 3: now,
		4: now.Add(3 * time.Second), 5: now.Add(5 * time.Second), 6: now.Add(ttl + margin)} {
		if d, _ := l.deadline(sid); !d.Equal(want) {
			t.Errorf("session %d: deadline %s after promotion, want %s", sid, d.Sub(now), want.Sub(now))
		}
	}
	// Session 3's silence already passed its TTL: it expires at once.
	if ids, _ := l.expired(now); len(ids) != 1 || ids[0] != 3 {
		t.Fatalf("expired at promotion: %v, want [3]", ids)
	}
	// The sessions the log records, unheard ones included, are
	// acknowledged only once recorded heard; session 1 at once.
	for sid, want := range map[locktable.SessionID]bool{1: false, 2: true, 4: true, 5: true, 6: true} {
		if _, deferred, ok := l.touch(sid, now, func(time.Duration, bool) {}); !ok || deferred != want {
			t.Errorf("session %d's keepalive: ok %v, deferred %v, want deferred %v", sid, ok, deferred, want)
		}
	}
}

// Silences are recorded once long (listAfterPromotion after a promotion,
// listAfter after a keepalive), then every checkpointStep; a keepalive of a
// recorded session is acknowledged only with the checkpoint that records
// it heard, and a healthy session is never recorded.
func TestLivenessCheckpoints(t *testing.T) {
	const ttl = 8 * time.Second
	l := newLiveness()
	t0 := time.Now()
	l.activate([]fsm.SessionMeta{{ID: 1, TTL: ttl}, {ID: 2, TTL: ttl}}, t0, t0, time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// Session 2 is heard every TTL/4; session 1 never.
	heard := func(d time.Duration) {
		t.Helper()
		if _, deferred, ok := l.touch(2, at(d), func(time.Duration, bool) { t.Error("session 2 acknowledged late") }); !ok || deferred {
			t.Fatalf("session 2's keepalive at %s: ok %v, deferred %v", d, ok, deferred)
		}
	}
	heard(500 * time.Millisecond)
	got, _, next := silences(l, at(999*time.Millisecond))
	if len(got) != 0 || !next.Equal(at(listAfterPromotion(ttl))) {
		t.Fatalf("before any is due: %v, next at %s", got, next.Sub(t0))
	}
	got, _, next = silences(l, at(time.Second))
	if len(got) != 1 || got[1] != time.Second || !next.Equal(at(time.Second+checkpointStep(ttl))) {
		t.Fatalf("at 1s: %v, next at %s; want session 1 silent 1s, next at 1.5s", got, next.Sub(t0))
	}
	heard(2500 * time.Millisecond)
	got, _, _ = silences(l, at(3*time.Second))
	if len(got) != 1 || got[1] != 3*time.Second {
		t.Fatalf("at 3s: %v, want session 1 silent 3s (one record per step due, the latest)", got)
	}
	heard(4500 * time.Millisecond)

	// Session 1's client comes back: its keepalive waits for the
	// checkpoint that records it heard.
	var acked []bool
	if _, deferred, ok := l.touch(1, at(5*time.Second), func(_ time.Duration, ok bool) { acked = append(acked, ok) }); !ok || !deferred {
		t.Fatalf("a recorded session's keepalive: ok %v, deferred %v; want deferred", ok, deferred)
	}
	got, acks, _ := silences(l, at(5*time.Second))
	if s, ok := got[1]; !ok || s != 0 || len(got) != 1 || len(acks) != 1 {
		t.Fatalf("after session 1 is heard: %v (%d acks), want session 1 silent 0 with its ack", got, len(acks))
	}
	if len(acked) != 0 {
		t.Fatal("acknowledged before the checkpoint applied")
	}
	acks[0](true)
	if len(acked) != 1 || !acked[0] {
		t.Fatalf("acks %v after the checkpoint applied", acked)
	}
	// Heard again, session 1 is acknowledged at once, and neither is
	// recorded while both are heard every TTL/4.
	for d := 6 * time.Second; d < 20*time.Second; d += ttl / 4 {
		heard(d)
		if _, deferred, _ := l.touch(1, at(d), func(time.Duration, bool) {}); deferred {
			t.Fatalf("session 1's keepalive at %s deferred", d)
		}
		if got, _, _ := silences(l, at(d+ttl/4-time.Millisecond)); len(got) != 0 {
			t.Fatalf("healthy sessions recorded at %s: %v", d, got)
		}
	}
}

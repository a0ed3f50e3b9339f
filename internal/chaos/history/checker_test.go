package history

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// Synthetic histories: for each property, one history that must fail and
// one that must pass. They are what shows that the checker can fail.

const ms = int64(time.Millisecond)

type hist struct{ evs []Event }

func (h *hist) add(e Event) *hist { h.evs = append(h.evs, e); return h }

// acq records a complete acquisition: requested at req, granted token at
// grant, one accepted write just after the grant, release sent at rel
// (all in ms).
func (h *hist) acq(client string, lease uint64, res string, token uint64, req, grant, rel int64) *hist {
	h.add(Event{At: req * ms, Kind: Requested, Client: client, Lease: lease, Resource: res})
	h.add(Event{At: grant * ms, Kind: Granted, Client: client, Lease: lease, Resource: res, Token: token})
	h.add(Event{At: grant*ms + 1, Kind: WriteAccepted, Client: client, Lease: lease, Resource: res, Token: token})
	h.add(Event{At: rel * ms, Kind: ReleaseSent, Client: client, Lease: lease, Resource: res, Token: token})
	h.add(Event{At: rel*ms + 1, Kind: Released, Client: client, Lease: lease, Resource: res, Token: token})
	return h
}

func (h *hist) lost(client string, lease uint64, res string, at int64) *hist {
	return h.add(Event{At: at * ms, Kind: Lost, Client: client, Lease: lease, Resource: res})
}

// valid records a move of the lease's deadline (ms), as a client does at
// a renewal or a keepalive.
func (h *hist) valid(client string, lease uint64, res string, at, deadline int64) *hist {
	return h.add(Event{At: at * ms, Kind: Valid, Client: client, Lease: lease, Resource: res, Deadline: deadline * ms})
}

// deadline sets the deadline recorded with the lease's grant (ms).
func (h *hist) deadline(client string, lease uint64, deadline int64) *hist {
	for i := range h.evs {
		if e := &h.evs[i]; e.Kind == Granted && e.Client == client && e.Lease == lease {
			e.Deadline = deadline * ms
		}
	}
	return h
}

func (h *hist) rejected(client string, lease uint64, res string, token uint64, at int64) *hist {
	return h.add(Event{At: at * ms, Kind: WriteRejected, Client: client, Lease: lease, Resource: res, Token: token})
}

func (h *hist) fault(round int, kind, target string, at, heal int64) *hist {
	h.add(Event{At: at * ms, Kind: Fault, Round: round, Fault: kind, Target: target})
	return h.add(Event{At: heal * ms, Kind: Heal, Round: round, Fault: kind, Target: target})
}

func check(t *testing.T, h *hist) *Report {
	t.Helper()
	evs := slices.Clone(h.evs)
	slices.Reverse(evs) // the checker must not rely on the input order
	r := Check(evs, CheckConfig{RecoveryBound: 1100 * time.Millisecond})
	for _, v := range r.Violations {
		t.Logf("%s", v)
	}
	return r
}

// expect asserts exactly the given violation counts per property.
func expect(t *testing.T, r *Report, want map[int]int) {
	t.Helper()
	for p := 1; p < len(r.ViolationCount); p++ {
		if r.ViolationCount[p] != want[p] {
			t.Errorf("property %d (%s): %d violations, want %d", p, propNames[p], r.ViolationCount[p], want[p])
		}
	}
}

func TestCheckExclusion(t *testing.T) {
	t.Run("fails: the stale holder acted on past its loss, unfenced", func(t *testing.T) {
		// a saw Lost at 20 (so it no longer believed it held the lock when
		// b was granted at 30), but it went on until 50 and no write of it
		// was rejected.
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 50).lost("a", 1, "r", 20).acq("b", 1, "r", 6, 25, 30, 40)
		expect(t, check(t, h), map[int]int{PropExclusion: 1})
	})
	t.Run("passes: the fenced store rejected the stale holder", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 50).lost("a", 1, "r", 20).acq("b", 1, "r", 6, 25, 30, 40).
			rejected("a", 1, "r", 5, 45)
		r := check(t, h)
		expect(t, r, nil)
		if r.ExcusedFenced != 1 {
			t.Errorf("excused by the fence: %d, want 1", r.ExcusedFenced)
		}
	})
	t.Run("passes: one after the other", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 6, 5, 30, 40).acq("a", 2, "r", 7, 41, 45, 50)
		expect(t, check(t, h), nil)
	})
	t.Run("passes: overlapping on different resources", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 50).acq("b", 1, "s", 6, 0, 20, 40)
		expect(t, check(t, h), nil)
	})
	t.Run("passes: the stale holder's deadline passed while it was stopped", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 62).deadline("a", 1, 25).fault(1, FaultPauseClient, "a", 15, 60).
			lost("a", 1, "r", 61).acq("b", 1, "r", 6, 25, 30, 40).acq("b", 2, "s", 1, 70, 71, 72)
		r := check(t, h)
		expect(t, r, nil)
		if r.ExcusedPaused != 0 {
			t.Errorf("excused by the pause: %d, want 0 (the section ended at the deadline)", r.ExcusedPaused)
		}
	})
	t.Run("passes: the stale holder was stopped when the other was granted", func(t *testing.T) {
		// Its deadline had not passed (a belief violation, below), but a
		// stopped process does nothing: the overlap is excused.
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 62).deadline("a", 1, 45).fault(1, FaultPauseClient, "a", 15, 60).
			lost("a", 1, "r", 61).acq("b", 1, "r", 6, 25, 30, 40).acq("b", 2, "s", 1, 70, 71, 72)
		r := check(t, h)
		expect(t, r, map[int]int{PropBelief: 1})
		if r.ExcusedPaused != 1 {
			t.Errorf("excused by the pause: %d, want 1", r.ExcusedPaused)
		}
	})
	t.Run("passes: the stale holder's section ended at its deadline", func(t *testing.T) {
		// a released late (50) but its deadline (25) came before b's grant:
		// past its deadline a client does not act.
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 50).deadline("a", 1, 25).lost("a", 1, "r", 45).acq("b", 1, "r", 6, 25, 30, 40)
		expect(t, check(t, h), nil)
	})
	t.Run("fails: a section never released overlaps the next", func(t *testing.T) {
		h := new(hist).add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 5}).
			lost("a", 1, "r", 20).acq("b", 1, "r", 6, 25, 30, 40)
		expect(t, check(t, h), map[int]int{PropExclusion: 1})
	})
}

func TestCheckTokenOrder(t *testing.T) {
	t.Run("fails: a later grant got a lower token", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 4, 25, 30, 40)
		expect(t, check(t, h), map[int]int{PropTokenOrder: 1})
	})
	t.Run("fails: a later grant got the same token", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 5, 25, 30, 40)
		expect(t, check(t, h), map[int]int{PropTokenOrder: 1, PropSingleGrant: 1})
	})
	t.Run("passes: increasing tokens", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 20).acq("b", 1, "r", 9, 25, 30, 40).acq("a", 2, "s", 2, 25, 30, 40)
		expect(t, check(t, h), nil)
	})
	t.Run("passes: stamps out of token order, requests concurrent", func(t *testing.T) {
		// b's grant (token 4) was stamped after a's (token 5), but b had
		// asked before a's grant was acknowledged: the order is not
		// certain (b got it first and released it, a's stamp ran late).
		h := new(hist).
			add(Event{At: 0, Kind: Requested, Client: "a", Lease: 1, Resource: "r"}).
			add(Event{At: 1 * ms, Kind: Requested, Client: "b", Lease: 1, Resource: "r"}).
			add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 5}).
			add(Event{At: 11 * ms, Kind: ReleaseSent, Client: "a", Lease: 1, Resource: "r", Token: 5}).
			add(Event{At: 5 * ms, Kind: Granted, Client: "b", Lease: 1, Resource: "r", Token: 4}).
			add(Event{At: 6 * ms, Kind: ReleaseSent, Client: "b", Lease: 1, Resource: "r", Token: 4})
		expect(t, check(t, h), nil)
	})
}

func TestCheckSingleGrant(t *testing.T) {
	t.Run("fails: one token acknowledged to two clients", func(t *testing.T) {
		h := new(hist).
			add(Event{At: 0, Kind: Requested, Client: "a", Lease: 1, Resource: "r"}).
			add(Event{At: 1 * ms, Kind: Requested, Client: "b", Lease: 1, Resource: "r"}).
			add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 7}).
			add(Event{At: 11 * ms, Kind: ReleaseSent, Client: "a", Lease: 1, Resource: "r", Token: 7}).
			add(Event{At: 12 * ms, Kind: Granted, Client: "b", Lease: 1, Resource: "r", Token: 7}).
			add(Event{At: 13 * ms, Kind: ReleaseSent, Client: "b", Lease: 1, Resource: "r", Token: 7})
		expect(t, check(t, h), map[int]int{PropSingleGrant: 1})
	})
	t.Run("fails: one lease acknowledged twice", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 7, 0, 10, 20).
			add(Event{At: 15 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 8})
		expect(t, check(t, h), map[int]int{PropSingleGrant: 1})
	})
	t.Run("passes: the same token on different resources", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 7, 0, 10, 20).acq("b", 1, "s", 7, 0, 10, 20)
		expect(t, check(t, h), nil)
	})
}

func TestCheckBelief(t *testing.T) {
	t.Run("fails: granted while the holder had not seen its loss", func(t *testing.T) {
		// The fence rejected a's late write, so exclusion holds, but a
		// believed it held the lock until 35 and b was granted at 30.
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 36).lost("a", 1, "r", 35).rejected("a", 1, "r", 1, 33).
			acq("b", 1, "r", 2, 20, 30, 40)
		r := check(t, h)
		expect(t, r, map[int]int{PropBelief: 1})
		if len(r.LossLeads) != 0 {
			t.Errorf("loss leads %v, want none (the loss came after the grant)", r.LossLeads)
		}
	})
	t.Run("passes: the loss was seen before the grant", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 36).lost("a", 1, "r", 25).rejected("a", 1, "r", 1, 33).
			acq("b", 1, "r", 2, 20, 30, 40)
		r := check(t, h)
		expect(t, r, nil)
		if len(r.LossLeads) != 1 || r.LossLeads[0] != 5*time.Millisecond {
			t.Errorf("loss leads %v, want [5ms]", r.LossLeads)
		}
	})
	t.Run("passes, counted: the loss was noticed late, after the recorded deadline", func(t *testing.T) {
		// a's deadline was 25; b was granted at 30; a's Lost fired at 35
		// (its goroutine ran late). The client had stopped believing at
		// 25: lateness, not a violation.
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 36).deadline("a", 1, 25).lost("a", 1, "r", 35).
			acq("b", 1, "r", 2, 20, 30, 40)
		r := check(t, h)
		expect(t, r, nil)
		if len(r.Late.By) != 1 || r.Late.By[0] != 10*time.Millisecond || r.Late.AfterNextGrant != 1 {
			t.Errorf("lateness %+v, want 10ms, once after the next grant", r.Late)
		}
		if len(r.LossLeads) != 1 || r.LossLeads[0] != 5*time.Millisecond {
			t.Errorf("loss leads %v, want [5ms] (from the deadline)", r.LossLeads)
		}
	})
	t.Run("passes, counted: a stopped client's loss noticed after it was resumed", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 501).deadline("a", 1, 25).fault(1, FaultPauseClient, "a", 15, 60).
			lost("a", 1, "r", 500).acq("b", 1, "r", 6, 25, 30, 40).acq("b", 2, "s", 1, 70, 71, 72)
		r := check(t, h)
		expect(t, r, nil)
		if len(r.Late.By) != 1 || r.Late.By[0] != 475*time.Millisecond {
			t.Errorf("lateness %+v, want 475ms", r.Late)
		}
	})
	t.Run("fails: the recorded deadline came after the next grant", func(t *testing.T) {
		// The client's own arithmetic said it held the lock until 40; b
		// was granted at 30 and a was told at 35.
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 36).deadline("a", 1, 40).lost("a", 1, "r", 35).rejected("a", 1, "r", 1, 33).
			acq("b", 1, "r", 2, 20, 30, 40)
		r := check(t, h)
		expect(t, r, map[int]int{PropBelief: 1})
		if len(r.Late.By) != 0 {
			t.Errorf("lateness %+v, want none (the loss came before the deadline)", r.Late)
		}
	})
	t.Run("fails: the latest recorded deadline counts", func(t *testing.T) {
		// Granted with a deadline of 20, renewed at 15 to 45: b's grant
		// at 30 came while a still held it by its own reckoning.
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 36).deadline("a", 1, 20).valid("a", 1, "r", 15, 45).
			lost("a", 1, "r", 35).rejected("a", 1, "r", 1, 33).acq("b", 1, "r", 2, 20, 30, 40)
		expect(t, check(t, h), map[int]int{PropBelief: 1})
	})
	t.Run("fails: a pause excuses no grant before the deadline", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 5, 0, 10, 62).deadline("a", 1, 45).fault(1, FaultPauseClient, "a", 15, 60).
			lost("a", 1, "r", 61).rejected("a", 1, "r", 5, 61).acq("b", 1, "r", 6, 25, 30, 40).acq("b", 2, "s", 1, 70, 71, 72)
		expect(t, check(t, h), map[int]int{PropBelief: 1})
	})
	t.Run("counts writes accepted past the writer's deadline", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 30).deadline("a", 1, 20).
			add(Event{At: 25 * ms, Kind: WriteAccepted, Client: "a", Lease: 1, Resource: "r", Token: 1})
		r := check(t, h)
		expect(t, r, nil)
		if r.LateWrites != 1 {
			t.Errorf("late writes %d, want 1", r.LateWrites)
		}
	})
}

func TestCheckRecovery(t *testing.T) {
	t.Run("fails: grants resumed too late", func(t *testing.T) {
		h := new(hist).fault(1, "kill-leader", "node-1", 100, 1100).acq("a", 1, "r", 1, 200, 2300, 2310)
		r := check(t, h)
		expect(t, r, map[int]int{PropRecovery: 1})
		if len(r.Recoveries) != 1 || r.Recoveries[0].Recovery != 1200*time.Millisecond || r.Recoveries[0].Failover != 2200*time.Millisecond {
			t.Errorf("recoveries %+v", r.Recoveries)
		}
	})
	t.Run("fails: no grant after the heal", func(t *testing.T) {
		h := new(hist).acq("a", 1, "r", 1, 0, 10, 20).fault(1, "kill-leader", "node-1", 100, 1100)
		expect(t, check(t, h), map[int]int{PropRecovery: 1})
	})
	t.Run("passes: grants resumed in time", func(t *testing.T) {
		h := new(hist).fault(1, "kill-leader", "node-1", 100, 1100).acq("a", 1, "r", 1, 200, 1400, 1410).
			fault(2, "stop-leader", "node-2", 2000, 3500).acq("b", 1, "r", 2, 1500, 2500, 2510).acq("a", 2, "r", 3, 2600, 3600, 3610)
		r := check(t, h)
		expect(t, r, nil)
		if r.Rounds != 2 || r.Faults["kill-leader"] != 1 || r.Faults["stop-leader"] != 1 || r.Acquisitions != 3 {
			t.Errorf("report %+v", r)
		}
	})
}

func TestHistoryRoundTrip(t *testing.T) {
	h := new(hist).acq("a", 1, "r", 1, 0, 10, 20).fault(1, "kill-leader", "node-1", 100, 1100)
	var buf bytes.Buffer
	if err := WriteEvents(&buf, h.evs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadEvents(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, h.evs) {
		t.Fatalf("round trip: %v, want %v", back, h.evs)
	}
}

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	time.Sleep(2 * time.Millisecond)
	if d := Since(a); d < 2*time.Millisecond || d > time.Second {
		t.Fatalf("2ms sleep measured %s", d)
	}
}

func TestCheckTakeover(t *testing.T) {
	flap := func(h *hist, at, heal int64) *hist {
		h.add(Event{At: at * ms, Kind: Fault, Round: 1, Fault: FaultFlapLeader, Target: "a", Resource: "r", Note: "kill"})
		return h.add(Event{At: heal * ms, Kind: Heal, Round: 1, Fault: FaultFlapLeader, Target: "a"})
	}
	t.Run("passes: another client is granted the resource in time", func(t *testing.T) {
		h := new(hist).add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 5, Deadline: 900 * ms})
		h.add(Event{At: 20 * ms, Kind: Exited, Client: "a"})
		flap(h, 20, 1500).acq("b", 1, "r", 6, 30, 1000, 1010).acq("b", 2, "r", 7, 1600, 1601, 1602)
		r := check(t, h)
		expect(t, r, nil)
		if len(r.Takeovers) != 1 || r.Takeovers[0].After != 980*time.Millisecond {
			t.Errorf("takeovers %+v, want one of 980ms", r.Takeovers)
		}
	})
	t.Run("fails: the takeover comes past the bound", func(t *testing.T) {
		h := new(hist).add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 5, Deadline: 900 * ms})
		h.add(Event{At: 20 * ms, Kind: Exited, Client: "a"})
		flap(h, 20, 1500).acq("b", 1, "r", 6, 30, 1400, 1410)
		r := Check(h.evs, CheckConfig{TakeoverBound: time.Second})
		expect(t, r, map[int]int{PropTakeover: 1, PropRecovery: 1})
	})
}

// A client killed and started again keeps its name: its first exit ends
// only the sections granted before it.
func TestCheckRestartedClient(t *testing.T) {
	h := new(hist).add(Event{At: 10 * ms, Kind: Granted, Client: "a", Lease: 1, Resource: "r", Token: 5, Deadline: 900 * ms})
	h.add(Event{At: 20 * ms, Kind: Exited, Client: "a"})
	h.acq("b", 1, "r", 6, 30, 1000, 1010).acq("a", 1000001, "r", 7, 1020, 1030, 1100).acq("b", 2, "r", 8, 1040, 1050, 1060)
	// b's second grant (1050) came while a's second lease was inside
	// (1030 to 1100): caught although a exited once before.
	expect(t, check(t, h), map[int]int{PropExclusion: 1, PropBelief: 1})
}

package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// ownedOpenCmd opens a session of identity owner.
func ownedOpenCmd(owner string) *dlmpb.Command {
	return &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: owner, TtlNanos: int64(10 * time.Second), Owner: owner}}}
}

// checkUsage checks that the FSM's counts are a recount of the table.
func checkUsage(t testing.TB, f *FSM, when string) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	if got, want := f.usage, f.recount(); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: counted %s, the table holds %s", when, usageString(got), usageString(want))
	}
	for owner, u := range f.usage.byOwner {
		if u.sessions > f.quotas.SessionsPerIdentity || u.locks > f.quotas.LocksPerIdentity {
			t.Fatalf("%s: %q holds %+v, beyond its quotas %+v", when, owner, *u, f.quotas)
		}
	}
}

func usageString(b quotaBook) string {
	s := "{"
	for owner, u := range b.byOwner {
		s += fmt.Sprintf("%q:%+v ", owner, *u)
	}
	return s + fmt.Sprintf("} session locks %v", b.sessionLocks)
}

func TestQuotaRefusals(t *testing.T) {
	f := NewFSMWithQuotas(locktable.Limits{}, Quotas{SessionsPerIdentity: 2, LocksPerIdentity: 3})
	rs := applyEntry(t, f, 1, 1*sec, ownedOpenCmd("a"), ownedOpenCmd("a"), ownedOpenCmd("a"), ownedOpenCmd("b"))
	mustOK(t, rs[0], rs[1], rs[3])
	if !errors.Is(rs[2].Err, ErrQuota) || ReasonOf(rs[2].Err) != dlmpb.Reason_REASON_QUOTA || rs[2].Session != 0 {
		t.Fatalf("a's third session: %+v, want ErrQuota", rs[2])
	}
	a1, a2, b := rs[0].Session, rs[1].Session, rs[3].Session

	// Three locks of a across its sessions, a waiter included; the fourth
	// is refused, and cached as such for its request id.
	mustOK(t, applyEntry(t, f, 2, 2*sec, lockCmd(a1, 1, "x", dlmpb.Mode_MODE_EX), lockCmd(a1, 2, "y", dlmpb.Mode_MODE_EX),
		lockCmd(a2, 1, "x", dlmpb.Mode_MODE_EX))...)
	r := applyEntry(t, f, 3, 3*sec, semCmd(a2, 2, "s", 5, 1))[0]
	if !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("a's fourth lock (a semaphore): %+v, want ErrQuota", r)
	}
	if r := applyEntry(t, f, 4, 4*sec, semCmd(a2, 2, "s", 5, 1))[0]; !r.Duplicate || ReasonOf(r.Err) != dlmpb.Reason_REASON_QUOTA {
		t.Fatalf("retry of the refused request: %+v, want the cached refusal", r)
	}
	// b has its own quota.
	mustOK(t, applyEntry(t, f, 5, 5*sec, lockCmd(b, 1, "x", dlmpb.Mode_MODE_NL), lockCmd(b, 2, "z", dlmpb.Mode_MODE_EX), lockCmd(b, 3, "w", dlmpb.Mode_MODE_EX))...)
	checkUsage(t, f, "at the quotas")
	// A conversion is not a new lock.
	mustOK(t, applyEntry(t, f, 6, 6*sec, convertCmd(a1, 2, dlmpb.Mode_MODE_PR))...)
	// Expiring a1 frees its two locks (and grants a2's waiter).
	applyEntry(t, f, 7, 7*sec, expireCmd(a1))
	checkUsage(t, f, "after expiry")
	mustOK(t, applyEntry(t, f, 8, 8*sec, lockCmd(a2, 3, "y", dlmpb.Mode_MODE_EX), lockCmd(a2, 4, "v", dlmpb.Mode_MODE_EX), ownedOpenCmd("a"))...)
	if r := applyEntry(t, f, 9, 9*sec, lockCmd(a2, 5, "u", dlmpb.Mode_MODE_EX))[0]; !errors.Is(r.Err, ErrQuota) {
		t.Fatalf("a at its lock quota again: %+v", r)
	}

	// Without an identity, no quota applies.
	for i := range 5 {
		rs := applyEntry(t, f, uint64(10+i), 10*sec, ownedOpenCmd(""))
		mustOK(t, rs...)
		for j := range 5 {
			mustOK(t, applyEntry(t, f, uint64(20+i*5+j), 10*sec, lockCmd(rs[0].Session, 0, fmt.Sprintf("open/%d/%d", i, j), dlmpb.Mode_MODE_EX))...)
		}
	}
	checkUsage(t, f, "with unauthenticated sessions")
}

// TestQuotaCountsAreARecount drives the FSM with a random mix of every
// command, for several identities and none, with small quotas and limits so
// that refusals happen: after every entry the counts equal a recount from
// the table, and a snapshot restores to the same counts.
func TestQuotaCountsAreARecount(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			f := NewFSMWithQuotas(locktable.Limits{MaxSessions: 12, MaxLocksPerSession: 6},
				Quotas{SessionsPerIdentity: 4, LocksPerIdentity: 8})
			owners := []string{"a", "b", "c", ""}
			names := []string{"r0", "r1", "r2", "r3", "r4"}
			index := uint64(1)
			now := int64(0)
			seq := map[locktable.SessionID]uint64{}
			var refused int
			for step := range 400 {
				var sessions []locktable.SessionID
				var locks []locktable.LockInfo
				f.Read(func(v View) {
					tab := v.Table()
					for _, s := range tab.Sessions(0, 0) {
						sessions = append(sessions, s.ID)
						locks = append(locks, s.Locks...)
					}
				})
				pickSession := func() locktable.SessionID {
					if len(sessions) == 0 || rng.IntN(20) == 0 {
						return locktable.SessionID(rng.IntN(1000) + 1) // unknown
					}
					return sessions[rng.IntN(len(sessions))]
				}
				pickLock := func() (locktable.SessionID, locktable.LockID) {
					if len(locks) == 0 {
						return pickSession(), locktable.LockID(rng.IntN(50) + 1)
					}
					l := locks[rng.IntN(len(locks))]
					return l.Session, l.ID
				}
				next := func(sid locktable.SessionID) uint64 {
					if rng.IntN(10) == 0 {
						return seq[sid] // a retry (or 0)
					}
					seq[sid]++
					return seq[sid]
				}
				var cmds []*dlmpb.Command
				for range rng.IntN(3) + 1 {
					switch k := rng.IntN(16); {
					case k < 3:
						cmds = append(cmds, ownedOpenCmd(owners[rng.IntN(len(owners))]))
					case k < 8:
						sid := pickSession()
						c := lockCmd(sid, next(sid), names[rng.IntN(len(names))], dlmpb.Mode(rng.IntN(6)+1))
						if rng.IntN(3) == 0 {
							c = withWait(c, int64(rng.IntN(3))*sec)
						}
						cmds = append(cmds, c)
					case k < 9:
						sid := pickSession()
						cmds = append(cmds, semCmd(sid, next(sid), "sem", 3, uint32(rng.IntN(3)+1)))
					case k < 11:
						sid, id := pickLock()
						c := releaseCmd(sid, id)
						c.Seq = next(sid)
						cmds = append(cmds, c)
					case k < 12:
						sid, id := pickLock()
						cmds = append(cmds, cancelCmd(sid, next(sid), id))
					case k < 13:
						sid, id := pickLock()
						c := convertCmd(sid, id, dlmpb.Mode(rng.IntN(6)+1))
						c.GetConvert().WaitNanos = ptr(int64(rng.IntN(2)) * sec)
						cmds = append(cmds, c)
					case k < 14:
						cmds = append(cmds, &dlmpb.Command{Op: &dlmpb.Command_CloseSession{CloseSession: &dlmpb.CloseSessionCmd{Session: uint64(pickSession())}}})
					case k < 15:
						cmds = append(cmds, expireCmd(pickSession(), pickSession()))
					default:
						cmds = append(cmds, &dlmpb.Command{Op: &dlmpb.Command_Advance{Advance: &dlmpb.AdvanceCmd{}}})
					}
				}
				now += int64(rng.IntN(1500)) * int64(time.Millisecond)
				for _, r := range applyEntry(t, f, index, now, cmds...) {
					if errors.Is(r.Err, ErrQuota) {
						refused++
					}
				}
				index++
				checkUsage(t, f, fmt.Sprintf("step %d", step))
				if step%50 == 49 {
					g := NewFSMWithQuotas(f.limits, f.quotas)
					if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(g.usage, f.usage) {
						t.Fatalf("step %d: restored counts %s, want %s", step, usageString(g.usage), usageString(f.usage))
					}
				}
			}
			if refused == 0 {
				t.Fatal("no request met a quota: the test does not test them")
			}
		})
	}
}

package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/memory"
)

// holdAndWait makes group g hold have and queue for want, and returns the
// pending request once it is queued: the holder of want is told that g
// waits behind it (holderBlocking).
func holdAndWait(t *testing.T, s *memory.Store, g, have, want string, holderBlocking <-chan struct{}) (driver.Request, driver.Grant, driver.Request, *waitFor) {
	t.Helper()
	hreq := lockReq(have, driver.EX, g)
	h := mustAcquire(t, s, hreq)
	wreq := lockReq(want, driver.EX, g)
	w := goWait(t, func(ctx context.Context) (driver.Grant, error) { return s.AcquireWait(ctx, wreq) })
	storetest.Closes(t, holderBlocking, within, "the holder of "+want+" told of the waiter")
	return hreq, h, wreq, w
}

// refusedAtOnce fails the test unless req, waited for, is refused with
// ErrDeadlock at once (not after ctx's end), naming the group and the
// resources of the cycle.
func refusedAtOnce(t *testing.T, s *memory.Store, req driver.Request, cycle ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	_, err := s.AcquireWait(ctx, req)
	if !errors.Is(err, driver.ErrDeadlock) || errors.Is(err, driver.ErrTaken) {
		t.Fatalf("the request closing the cycle = %v, want ErrDeadlock at once", err)
	}
	if !strings.HasPrefix(err.Error(), driver.ErrDeadlock.Error()+": ") || !strings.Contains(err.Error(), req.Group) {
		t.Errorf("error %q does not start with ErrDeadlock or does not name the group", err)
	}
	quoted := make([]string, len(cycle))
	for i, r := range cycle {
		quoted[i] = `"` + r + `"`
	}
	if want := "cycle through " + strings.Join(quoted, ", "); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the cycle (%s)", err, want)
	}
	t.Logf("refused: %v", err)
}

// TestGroupsInARing: A holds x and waits for y; B, holding y, asking for x
// is refused at once. Once B lets y go, A gets it.
func TestGroupsInARing(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	ga, gb := newID(), newID()
	yreq := lockReq("y", driver.EX, gb)
	y := mustAcquire(t, s, yreq)
	_, _, _, wa := holdAndWait(t, s, ga, "x", "y", y.Blocking)
	refusedAtOnce(t, s, lockReq("x", driver.EX, gb), "x", "y")
	// The refusal left B as it was: it still holds y.
	if err := s.Extend(ctx, yreq, y); err != nil {
		t.Fatalf("B lost y to the refusal: %v", err)
	}
	if err := s.Release(ctx, yreq, y); err != nil {
		t.Fatal(err)
	}
	if _, err := wa.result(t); err != nil {
		t.Fatalf("A after B released y: %v", err)
	}
}

// TestThreeGroupsInARing: A holds x waits y, B holds y waits z, C holds z
// and asks for x: refused at once.
func TestThreeGroupsInARing(t *testing.T) {
	s := newStore(t)
	ga, gb, gc := newID(), newID(), newID()
	z := mustAcquire(t, s, lockReq("z", driver.EX, gc))
	_, y, _, _ := holdAndWait(t, s, gb, "y", "z", z.Blocking)
	holdAndWait(t, s, ga, "x", "y", y.Blocking)
	refusedAtOnce(t, s, lockReq("x", driver.EX, gc), "x", "y", "z")
	// Without groups the same requests are three strangers: no cycle is
	// seen, and the request waits (here, until its context ends).
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.AcquireWait(ctx, lockReq("x", driver.EX, "")); !errors.Is(err, driver.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an ungrouped request = %v, want ErrTaken at its deadline", err)
	}
}

// TestGroupReentrancy: a group asking again, in a conflicting mode, for a
// lock it holds would wait on itself: refused at once when waiting, taken
// for a try-lock; a compatible mode is granted.
func TestGroupReentrancy(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	g := newID()
	mustAcquire(t, s, lockReq("x", driver.EX, g))
	refusedAtOnce(t, s, lockReq("x", driver.EX, g), "x")
	if _, err := s.Acquire(ctx, lockReq("x", driver.EX, g)); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("a try-lock = %v, want ErrTaken", err)
	}
	mustAcquire(t, s, lockReq("r", driver.PR, g))
	if _, err := s.AcquireWait(ctx, lockReq("r", driver.PR, g)); err != nil {
		t.Fatalf("PR beside the group's own PR: %v", err)
	}
	refusedAtOnce(t, s, lockReq("r", driver.EX, g), "r")
	if st := s.TableStats(); st.Sessions != 1 || st.Locks != 3 || st.Pending != 0 {
		t.Fatalf("table after the refusals: %+v, want the group's one session and 3 locks", st)
	}
}

// TestGroupConversionDeadlock: two readers of one group converting to EX
// wait on each other: the conversion is refused at once.
func TestGroupConversionDeadlock(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	g := newID()
	mustAcquire(t, s, lockReq("r", driver.PR, g))
	req := lockReq("r", driver.PR, g)
	held := mustAcquire(t, s, req)
	if _, err := s.Convert(ctx, req, held, driver.EX); !errors.Is(err, driver.ErrDeadlock) || !strings.Contains(err.Error(), g) {
		t.Fatalf("conversion = %v, want ErrDeadlock naming the group", err)
	}
}

// TestGroupLockExpiresAlone: a group's lock whose TTL runs out is released
// (and goes to its waiter) while the group's other lock stays held.
func TestGroupLockExpiresAlone(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	g := newID()
	short := lockReq("x", driver.EX, g)
	short.TTL = 50 * time.Millisecond
	sg := mustAcquire(t, s, short)
	long := lockReq("y", driver.EX, g)
	lg := mustAcquire(t, s, long)
	if _, err := s.AcquireWait(ctx, lockReq("x", driver.EX, "")); err != nil {
		t.Fatalf("waiting for the expiring lock: %v", err)
	}
	if err := s.Extend(ctx, short, sg); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("extend of the expired lock = %v, want ErrNotHeld", err)
	}
	if err := s.Extend(ctx, long, lg); err != nil {
		t.Fatalf("the group's other lock: %v", err)
	}
	info, err := s.Inspect(ctx, "y")
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != long.Owner || info.Holders[0].Session != g {
		t.Fatalf("y = %+v, %v: want held by the group", info, err)
	}
	if n := s.Groups(); n != 1 {
		t.Fatalf("%d groups, want 1", n)
	}
}

// TestGroupSessionClosedOnceEmpty: a group's session lives while the group
// has a lock or a request, whatever ended them (release, expiry, timeout,
// cancel, refusal), and the table does not grow with groups come and
// gone.
func TestGroupSessionClosedOnceEmpty(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	empty := func(what string) {
		t.Helper()
		if st := s.TableStats(); st.Sessions != 0 || st.Locks != 0 || st.Resources != 0 || s.Groups() != 0 {
			t.Fatalf("after %s: %+v and %d groups, want nothing", what, st, s.Groups())
		}
	}
	g := newID()
	a, b := lockReq("a", driver.EX, g), lockReq("b", driver.EX, g)
	ga, gb := mustAcquire(t, s, a), mustAcquire(t, s, b)
	if err := s.Release(ctx, a, ga); err != nil {
		t.Fatal(err)
	}
	if st := s.TableStats(); st.Sessions != 1 || s.Groups() != 1 {
		t.Fatalf("a group with a lock left: %+v, %d groups", st, s.Groups())
	}
	if err := s.Release(ctx, b, gb); err != nil {
		t.Fatal(err)
	}
	empty("releases")

	for i := range 100 {
		req := lockReq("r", driver.EX, newID())
		g := mustAcquire(t, s, req)
		if err := s.Release(ctx, req, g); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	empty("100 groups")

	hreq := lockReq("h", driver.EX, "")
	h := mustAcquire(t, s, hreq)
	if _, err := s.Acquire(ctx, lockReq("h", driver.EX, newID())); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("try-lock = %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := s.AcquireWait(wctx, lockReq("h", driver.EX, newID()))
	cancel()
	if !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("timed-out wait = %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := goWait(t, func(context.Context) (driver.Grant, error) {
		return s.AcquireWait(cctx, lockReq("h", driver.EX, newID()))
	})
	watchUntil(t, s, "h", func() bool { return s.Waiting("h") == 1 })
	cancel()
	if _, err := w.result(t); !errors.Is(err, driver.ErrTaken) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait = %v", err)
	}
	if st := s.TableStats(); st.Sessions != 1 || s.Groups() != 0 {
		t.Fatalf("after a refusal, a timeout and a cancel: %+v and %d groups, want the holder alone", st, s.Groups())
	}
	if err := s.Release(ctx, hreq, h); err != nil {
		t.Fatal(err)
	}
	ereq := lockReq("h", driver.EX, newID())
	eg := mustAcquire(t, s, ereq)
	ereq.TTL = time.Millisecond
	if err := s.Extend(ctx, ereq, eg); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, s, "h", func() bool { return s.TableStats().Locks == 0 })
	empty("an expiry")
}

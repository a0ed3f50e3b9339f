package dlmserver_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

func TestMutualExclusion(t *testing.T) {
	c1, _ := newClient(t)
	c2, _ := newClient(t)
	storetest.MutualExclusion(t, []*dlm.Client{c1, c2}, 16, 20)
}

func TestFIFO16Waiters(t *testing.T) {
	c, _ := newClient(t)
	storetest.FIFOHandoff(t, c, 16, newLister(t, shared.Addr()).waiting)
}

func TestWaitTimeoutAndCancel(t *testing.T) {
	c, _ := newClient(t)
	ls := newLister(t, shared.Addr())
	left := func(name string) {
		storetest.Await(t, 5*time.Second, "request withdrawn", func() bool { return ls.waiting(name) == 0 })
	}
	storetest.WaitTimeoutIsContention(t, c, 30*time.Millisecond, 2, left)
	storetest.ContextCancelWhileWaiting(t, c, ls.waiting, left)
}

func TestBadInput(t *testing.T) {
	c, _ := newClient(t)
	storetest.BadInput(t, c)
}

func TestLongestNameIsAccepted(t *testing.T) {
	c, _ := newClient(t)
	storetest.LongestNameAccepted(t, c)
}

func TestSharedReadersExclusiveWriterAndConversion(t *testing.T) {
	c, _ := newClient(t)
	ls := newLister(t, shared.Addr())
	storetest.SharedReadersExclusiveWriter(t, c, ls.waiting, ls.holders, true)
}

func TestConversionDeadlockIsRefused(t *testing.T) {
	c, _ := newClient(t)
	storetest.ConversionDeadlock(t, c, newLister(t, shared.Addr()).waiting)
}

func TestSemaphore(t *testing.T) {
	c, _ := newClient(t)
	storetest.Semaphore(t, c)
}

// The gap from a release to the next grant is a push, not a poll: with a
// retry interval of a minute the waiter is still granted at once.
func TestHandoffIsPushed(t *testing.T) {
	c, _ := newClient(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		l, err := c.Acquire(ctx, name, dlm.WithRetry(dlm.LinearBackoff(time.Minute)))
		if err != nil {
			t.Error(err)
		} else {
			l.Release(ctx)
		}
		close(got)
	}()
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return newLister(t, shared.Addr()).waiting(name) == 1 })
	holder.Release(ctx)
	// A poll would take the minute; the bound leaves a loaded machine
	// plenty of slack below it.
	gap := storetest.Within(t, got, 20*time.Second, "pushed grant")
	t.Logf("release to grant: %s", gap)
}

func TestMetadataIsListed(t *testing.T) {
	c, _ := newClient(t)
	name := storetest.Resource(t)
	l, err := c.Acquire(t.Context(), name, dlm.WithMetadata("host-a pid 42"), dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	h := newLister(t, shared.Addr()).resource(name).GetHolders()
	if len(h) != 1 || string(h[0].GetMetadata()) != "host-a pid 42" {
		t.Fatalf("holders %v, want one with the metadata", h)
	}
}

func TestTryLockAndTokensIncrease(t *testing.T) {
	c, _ := newClient(t)
	k := storetest.NewTokens(t, c, dlm.WithWait(0))
	name := storetest.Resource(t)
	for i := range 5 {
		l := k.Next("acquire", name)
		if _, err := c.Acquire(t.Context(), name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("round %d: try-lock of a held lock: %v", i, err)
		}
		l.Release(t.Context())
	}
}

func TestDoRunsUnderTheLock(t *testing.T) {
	c, _ := newClient(t)
	storetest.RenewalHoldsPastTTL(t, c, 2*time.Second, 5*time.Second)
}

func TestNoGoroutineLeak(t *testing.T) {
	s, err := dlmserver.Dial(t.Context(), shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := dlm.New(s)
	storetest.NoGoroutineLeak(t, c, 8, func() { s.Close(context.Background()) },
		"github.com/dlmhq/dlm.", "github.com/dlmhq/dlm/dlmserver.", "google.golang.org/grpc")
}

// kill -9 a client process holding a lock: the server releases it when the
// session TTL passes, and the next waiter is granted.
func TestKilledClientReleasesAfterTTL(t *testing.T) {
	// Long enough that a loaded machine's late keepalives (every TTL/4)
	// stay well inside it.
	const ttl = 2 * time.Second
	name := storetest.Resource(t)
	child := startChild(t, shared.Addr(), name, ttl)
	c, _ := newClient(t)
	ctx := storetest.Context(t)
	if _, err := c.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("lock not held by the child: %v", err)
	}
	got := queue(t, c, name, 1)
	killed := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var l *dlm.Lease
	select {
	case l = <-got:
	case <-time.After(ttl + 10*time.Second): // slack for a loaded machine
		t.Fatal("the waiter was not granted after the holder died")
	}
	took := time.Since(killed)
	t.Logf("granted %s after kill -9 of the holder (session TTL %s)", took, ttl)
	// The keepalive before the kill was at most ttl/4 old (on time), and the
	// server expires the session at its arrival + ttl: not at the kill,
	// whatever the load (which, making keepalives late, only brings the
	// expiry closer than ttl*3/4).
	if took < ttl/2 {
		t.Fatalf("granted %s after the kill, before the session TTL %s could pass", took, ttl)
	}
	l.Release(ctx)
}

// A client whose keepalives stall loses its lease before the server grants
// its lock to anyone else: the lease's validity (its Deadline) ends before
// the grant. When Lost fires is a timer's business, which a loaded machine
// runs late: it is logged.
func TestStalledClientLosesBeforeRegrant(t *testing.T) {
	// A short session TTL, but not so short that a loaded machine misses
	// the handshake, which Dial gives a keepalive interval (TTL/4).
	const ttl = 2 * time.Second
	proxy := testenv.StartProxy(t, shared.Addr())
	stalled := dlm.New(dial(t, proxy.Addr(), dlmserver.WithSessionTTL(ttl)))
	other, _ := newClient(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	l, err := stalled.Acquire(ctx, name, dlm.WithTTL(time.Minute), dlm.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan time.Time, 1)
	go func() {
		l2, err := other.Acquire(ctx, name)
		granted <- time.Now()
		if err != nil {
			t.Error(err)
			return
		}
		l2.Release(ctx)
	}()
	storetest.Await(t, 5*time.Second, "waiter queued", func() bool { return newLister(t, shared.Addr()).waiting(name) == 1 })
	valid := validity(l)
	proxy.Stall()
	storetest.Within(t, l.Lost(), ttl+10*time.Second, "Lost after keepalives stalled")
	lostAt := time.Now()
	var grantAt time.Time
	select {
	case grantAt = <-granted:
	case <-time.After(ttl + 10*time.Second):
		t.Fatal("the waiter was not granted after the holder's session expired")
	}
	// grantAt is when the other client learned of its grant: no earlier
	// than the server made it.
	validUntil := <-valid
	if validUntil.IsZero() || !validUntil.Before(grantAt) {
		t.Fatalf("the server granted the lock while the stalled holder's lease was valid (until %s after the grant)", validUntil.Sub(grantAt))
	}
	t.Logf("the holder's lease was valid until %s before the grant; it saw Lost %s before it", grantAt.Sub(validUntil), grantAt.Sub(lostAt))
	if !errors.Is(l.Err(), dlm.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	proxy.Resume()
}

// validity samples l's Deadline until l is lost, and then sends it: with
// the dlm server, the session's validity, which only acknowledged keepalives
// move (send time + session TTL − drift), and which the lease keeps once
// lost. (The sampling makes sure the lease has seen the last validity the
// store gave.)
func validity(l *dlm.Lease) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.Lost():
				out <- l.Deadline()
				return
			case <-tick.C:
				l.Deadline()
			}
		}
	}()
	return out
}

// The server dies: the lease is lost by its deadline, the session's
// validity. (A short session TTL, but not so short that a loaded machine
// misses the handshake, which Dial gives a keepalive interval, TTL/4.)
func TestLostWhenServerDies(t *testing.T) {
	srv := testenv.StartDLM(t, bin)
	c := dlm.New(dial(t, srv.Addr(), dlmserver.WithSessionTTL(2*time.Second)))
	storetest.LostWhenServerDies(t, c, srv.Kill)
	storetest.UnavailableIsNotContention(t, c)
}

// Restart the server with locks held: state and the token sequence survive,
// and a client that reconnects within its TTL keeps its locks.
func TestRestartKeepsLocksAndTokens(t *testing.T) {
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			srv := testenv.StartDLM(t, bin)
			// The restart must fit in the session TTL, however loaded the
			// machine.
			store := dial(t, srv.Addr(), dlmserver.WithSessionTTL(30*time.Second))
			c := dlm.New(store)
			ctx := storetest.Context(t)
			name := storetest.Resource(t)
			l, err := c.Acquire(ctx, name, dlm.WithTTL(time.Minute), dlm.WithAutoRenew(true))
			if err != nil {
				t.Fatal(err)
			}
			sid := store.Session()
			if how == "SIGTERM" {
				srv.Stop()
			} else {
				srv.Kill()
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			other := dlm.New(dial(t, srv.Addr()))
			if _, err := other.Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
				t.Fatalf("lock free after the restart: %v", err)
			}
			// The client resumes its session; a new lock on it proves it.
			var l2 *dlm.Lease
			storetest.Await(t, 20*time.Second, "client resumed", func() bool {
				l2, err = c.Acquire(ctx, name+"/2", dlm.WithWait(0))
				return err == nil
			})
			select {
			case <-l.Lost():
				t.Fatalf("lease lost across the restart: %v", l.Err())
			default:
			}
			if store.Session() != sid {
				t.Fatalf("session %d replaced by %d: not resumed", sid, store.Session())
			}
			if l2.Token() <= l.Token() {
				t.Fatalf("token %d after the restart is not above %d before", l2.Token(), l.Token())
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release after the restart: %v", err)
			}
			storetest.Free(t, other, name, "the release")
			l2.Release(ctx)
		})
	}
}

// A down-conversion is not abandoned when its context ends: the server
// grants it at once (letting waiting readers in), and the lease must agree.
func TestDownConversionIsNotAbandoned(t *testing.T) {
	c, _ := newClient(t)
	ls := newLister(t, shared.Addr())
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	w, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	reader := queue(t, c, name, 1, dlm.WithMode(dlm.PR))
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Convert(done, dlm.PR); err != nil {
		t.Fatalf("EX->PR with an ended context: %v", err)
	}
	if w.Mode() != dlm.PR {
		t.Fatalf("mode %v after the down-conversion", w.Mode())
	}
	r := <-reader
	if got := ls.resource(name).GetHolders(); len(got) != 2 {
		t.Fatalf("%d holders, want the converted writer and the reader", len(got))
	}
	r.Release(ctx)
	w.Release(ctx)
	storetest.Free(t, c, name, "both released")
}

// A conversion that waits and is given up leaves the lock held in its old
// mode, in the server as in the lease; releasing it frees the resource.
func TestAbandonedConversionKeepsTheOldMode(t *testing.T) {
	c, _ := newClient(t)
	storetest.AbandonedConversionKeepsTheOldMode(t, c, newLister(t, shared.Addr()).waiting)
}

// Releases made while the server is down wait for the reconnect and are
// all carried out, in order, once the session is resumed.
func TestReleasesSurviveAReconnect(t *testing.T) {
	srv := testenv.StartDLM(t, bin)
	// The restart must fit in the session TTL, however loaded the machine.
	c := dlm.New(dial(t, srv.Addr(), dlmserver.WithSessionTTL(30*time.Second)))
	ctx := storetest.Context(t)
	const n = 60
	names := make([]string, n)
	leases := make([]*dlm.Lease, n)
	for i := range n {
		names[i] = storetest.Resource(t)
		l, err := c.Acquire(ctx, names[i], dlm.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	srv.Kill()
	errs := make(chan error, n)
	for _, l := range leases {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			errs <- l.Release(rctx)
		}()
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("release across the reconnect: %v", err)
		}
	}
	other := dlm.New(dial(t, srv.Addr()))
	for _, name := range names {
		storetest.Free(t, other, name, "the release across a reconnect")
	}
}

// queue starts c.Acquire of name with opts in the background and returns
// once the server lists waiting requests and conversions on name; the lease
// comes on the channel when granted (nil, with the test failed, on error).
func queue(t *testing.T, c *dlm.Client, name string, waiting int, opts ...dlm.Option) <-chan *dlm.Lease {
	t.Helper()
	ctx := storetest.Context(t)
	got := storetest.Acquiring(ctx, t, c, name, opts...)
	ls := newLister(t, shared.Addr())
	storetest.Await(t, 5*time.Second, "request queued", func() bool { return ls.waiting(name) == waiting })
	return got
}

func TestElection(t *testing.T) {
	c, _ := newClient(t)
	storetest.Election(t, c, true)
}

func TestLeaseBlocking(t *testing.T) {
	c, _ := newClient(t)
	storetest.Blocking(t, c, true)
}

func TestOwnerRings(t *testing.T) {
	c, _ := newClient(t)
	ls := newLister(t, shared.Addr())
	for _, n := range []int{2, 3} {
		storetest.OwnerRing(t, c, n, ls.waiting)
	}
}

// Calls whose contexts end at random points, on both transports: a lease is
// held until it is released, an acquisition that fails leaves nothing held,
// a release that returned is done.
func TestCancellation(t *testing.T) {
	for _, tr := range []dlmserver.Transport{dlmserver.TransportTCP, dlmserver.TransportGRPC} {
		t.Run(tr.String(), func(t *testing.T) {
			c, _ := newClient(t, dlmserver.WithTransport(tr))
			checker, _ := newClient(t)
			storetest.Cancellation(t, c, checker, storetest.Cancels{Convert: true, Semaphores: true, Elections: true})
		})
	}
}

package dlmserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// grouped returns request(resource, mode) of group g.
func grouped(resource string, mode driver.Mode, g string) driver.Request {
	r := request(resource, mode)
	r.Group = g
	return r
}

// newGroup returns a fresh group id.
func newGroup() string { return request("", 0).Owner }

// held is a grant and its request.
type held struct {
	req driver.Request
	g   driver.Grant
}

// take acquires req on s at once or fails the test; the lock is released
// at the end of the test.
func take(t *testing.T, s *dlmserver.Store, req driver.Request) held {
	t.Helper()
	g, err := s.Acquire(storetest.Context(t), req)
	if err != nil {
		t.Fatalf("acquire %q: %v", req.Resource, err)
	}
	t.Cleanup(func() { _ = s.Release(context.Background(), req, g) })
	return held{req, g}
}

// wantDeadlock fails the test unless AcquireWait of req on s is refused
// as a deadlock, naming the resource, within 10 s.
func wantDeadlock(t *testing.T, s *dlmserver.Store, req driver.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(storetest.Context(t), 10*time.Second)
	defer cancel()
	_, err := s.AcquireWait(ctx, req)
	resource := req.Resource
	if !errors.Is(err, driver.ErrDeadlock) {
		t.Fatalf("got %v, want driver.ErrDeadlock", err)
	}
	if !strings.Contains(err.Error(), resource) {
		t.Errorf("the refusal %q does not name %q", err, resource)
	}
	t.Logf("refused: %v", err)
}

func TestFeaturesDeadlocks(t *testing.T) {
	if s := dial(t, shared.Addr()); !driver.Has(s, driver.FeatureDeadlocks) {
		t.Fatal("FeatureDeadlocks not declared")
	}
}

// Two groups on two sessions: A holds x and waits for y, which B holds;
// B's request for x is refused at once as a deadlock. The same requests
// without groups are separate owners, and B's request queues.
func TestGroupDeadlockTwoSessions(t *testing.T) {
	ctx := storetest.Context(t)
	a, b := dial(t, shared.Addr()), dial(t, shared.Addr())
	x, y := storetest.Resource(t), storetest.Resource(t)
	ga, gb := newGroup(), newGroup()

	hx := take(t, a, grouped(x, driver.EX, ga))
	hy := take(t, b, grouped(y, driver.EX, gb))
	aWaits := waitFor(ctx, a, grouped(y, driver.EX, ga))
	storetest.Within(t, hy.g.Blocking, 10*time.Second, "A queued for y")

	wantDeadlock(t, b, grouped(x, driver.EX, gb))

	// Without B's group, its request is another owner, which holds
	// nothing: it waits.
	wctx, cancel := context.WithCancel(ctx)
	bWaits := waitFor(wctx, b, request(x, driver.EX))
	storetest.Within(t, hx.g.Blocking, 10*time.Second, "B queued for x")
	cancel()
	if err := <-bWaits; !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("B's withdrawn wait: %v, want driver.ErrTaken", err)
	}

	if err := b.Release(ctx, hy.req, hy.g); err != nil {
		t.Fatal(err)
	}
	if err := <-aWaits; err != nil {
		t.Fatalf("A's wait for y: %v", err)
	}
}

// Three groups in a ring: G1 holds x and waits for y, G2 holds y and waits
// for z, G3 holds z and asks for x.
func TestGroupDeadlockRing(t *testing.T) {
	ctx := storetest.Context(t)
	stores := []*dlmserver.Store{dial(t, shared.Addr()), dial(t, shared.Addr()), dial(t, shared.Addr())}
	names := []string{storetest.Resource(t), storetest.Resource(t), storetest.Resource(t)}
	groups := []string{newGroup(), newGroup(), newGroup()}
	hs := make([]held, 3)
	for i := range 3 {
		hs[i] = take(t, stores[i], grouped(names[i], driver.EX, groups[i]))
	}
	var waits []<-chan error
	for i := range 2 {
		waits = append(waits, waitFor(ctx, stores[i], grouped(names[i+1], driver.PR, groups[i])))
		storetest.Within(t, hs[i+1].g.Blocking, 10*time.Second, fmt.Sprintf("G%d queued", i+1))
	}
	wantDeadlock(t, stores[2], grouped(names[0], driver.PR, groups[2]))

	// Unwind: G3 releases z, G2 gets it and releases y with it, G1 gets y.
	if err := stores[2].Release(ctx, hs[2].req, hs[2].g); err != nil {
		t.Fatal(err)
	}
	if err := <-waits[1]; err != nil {
		t.Fatal(err)
	}
	if err := stores[1].Release(ctx, hs[1].req, hs[1].g); err != nil {
		t.Fatal(err)
	}
	if err := <-waits[0]; err != nil {
		t.Fatal(err)
	}
}

// A group that holds x and asks for x again in a conflicting mode would
// wait on itself: a waiting request is refused at once as a deadlock, a
// try-lock as taken. A compatible mode is granted beside the first.
func TestGroupReentrancy(t *testing.T) {
	ctx := storetest.Context(t)
	s := dial(t, shared.Addr())
	x := storetest.Resource(t)
	g := newGroup()

	take(t, s, grouped(x, driver.EX, g))
	wantDeadlock(t, s, grouped(x, driver.EX, g))
	if _, err := s.Acquire(ctx, grouped(x, driver.EX, g)); !errors.Is(err, driver.ErrTaken) {
		t.Fatalf("try-lock: %v, want driver.ErrTaken", err)
	}

	y := storetest.Resource(t)
	take(t, s, grouped(y, driver.PR, g))
	take(t, s, grouped(y, driver.PR, g))
}

// deadlockChildEnv makes the test binary run as a client process for
// TestGroupDeadlockAcrossProcesses: "addr|x|y". It takes x in a group,
// says "held", waits for y in the same group, says "got y" and exits.
const deadlockChildEnv = "DLM_REMOTE_TEST_DEADLOCK_CHILD"

func runDeadlockChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad child spec", spec)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := dlmserver.Dial(ctx, parts[0], dlmserver.WithLabel("deadlock child"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close(context.Background())
	g := newGroup()
	if _, err := s.Acquire(ctx, grouped(parts[1], driver.EX, g)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	if _, err := s.AcquireWait(ctx, grouped(parts[2], driver.EX, g)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("got y")
	return 0
}

// The cycle closes across two processes: the child's group holds x and
// waits for y, which this process's group holds; this group's request for
// x is refused.
func TestGroupDeadlockAcrossProcesses(t *testing.T) {
	ctx := storetest.Context(t)
	s := dial(t, shared.Addr())
	x, y := storetest.Resource(t), storetest.Resource(t)
	g := newGroup()
	hy := take(t, s, grouped(y, driver.EX, g))

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s", deadlockChildEnv, shared.Addr(), x, y))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewReader(out)
	if line, err := lines.ReadString('\n'); line != "held\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	storetest.Within(t, hy.g.Blocking, 10*time.Second, "the child queued for y")

	wantDeadlock(t, s, grouped(x, driver.EX, g))

	if err := s.Release(ctx, hy.req, hy.g); err != nil {
		t.Fatal(err)
	}
	if line, err := lines.ReadString('\n'); line != "got y\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	_, _ = io.Copy(io.Discard, lines)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

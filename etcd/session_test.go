package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/etcd"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// holdSome acquires n fresh resources through c, renewing, with ttl.
func holdSome(t *testing.T, c *dlm.Client, n int, ttl time.Duration) ([]string, []*dlm.Lease) {
	t.Helper()
	var names []string
	var leases []*dlm.Lease
	for i := range n {
		name := storetest.Resource(t) + "/" + string(rune('a'+i))
		l, err := c.Acquire(storetest.Context(t), name, dlm.WithTTL(ttl), dlm.WithAutoRenew(true))
		if err != nil {
			t.Fatal(err)
		}
		names, leases = append(names, name), append(leases, l)
	}
	return names, leases
}

func TestOneLeasePerSession(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	_, leases := holdSome(t, c, 3, 5*time.Second)
	id := e.leaseOf(leases[0].Token())
	for _, l := range leases[1:] {
		if got := e.leaseOf(l.Token()); got != id {
			t.Fatalf("leases %x and %x: the locks of one TTL share the session's lease", got, id)
		}
	}
	_, other := holdSome(t, c, 1, 3*time.Second)
	if got := e.leaseOf(other[0].Token()); got == id {
		t.Fatalf("a lock of another TTL is under the same lease %x", id)
	}
}

func TestSessionRevokedLosesEveryLock(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client()
	names, leases := holdSome(t, c, 3, 5*time.Second)
	id := e.leaseOf(leases[0].Token())
	e.revoke(leases[0]) // the session's lease, as an operator would
	for i, l := range leases {
		storetest.Within(t, l.Lost(), 10*time.Second, "Lost of "+names[i])
		if !errors.Is(l.Err(), dlm.ErrLost) {
			t.Fatalf("%s: Err = %v, want ErrLost", names[i], l.Err())
		}
	}
	// A new session serves the next requests.
	l, err := c.Acquire(storetest.Context(t), names[0], dlm.WithTTL(5*time.Second), dlm.WithWait(0))
	if err != nil {
		t.Fatalf("after the session was revoked: %v", err)
	}
	if e.leaseOf(l.Token()) == id {
		t.Fatal("the new lock is under the revoked lease")
	}
	l.Release(storetest.Context(t))
}

func TestLostBeforeAnotherClientIsGranted(t *testing.T) {
	e := newEnv(t)
	// Client A reaches etcd through a proxy that the test stalls; client
	// B reaches it directly.
	proxy := testenv.StartProxy(t, strings.TrimPrefix(e.srv.Endpoint(), "http://"))
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"http://" + proxy.Addr()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	t.Cleanup(proxy.Resume) // before the client closes
	// A holds through the store itself: package dlm's own deadline,
	// renewed by Extend through the same proxy, would otherwise end the
	// leases about as soon, and hide a late Lost from the store.
	a := etcd.New(cli, etcdTimeout)
	t.Cleanup(func() { a.Close(context.Background()) })
	b, _ := e.client()
	ctx := storetest.Context(t)

	var names []string
	var grants []driver.Grant
	for i := range 3 {
		req := request(storetest.Resource(t)+"/"+string(rune('a'+i)), "a")
		req.TTL = 2 * time.Second // etcd's shortest lease
		g, err := a.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if g.Lost == nil {
			t.Fatal("a grant without a Lost channel")
		}
		names, grants = append(names, req.Resource), append(grants, g)
	}
	granted := make(chan error, len(names))
	for i, name := range names {
		go func() {
			l, err := b.Acquire(ctx, name, dlm.WithTTL(5*time.Second), dlm.WithWait(30*time.Second))
			if err != nil {
				granted <- err
				return
			}
			defer l.Release(ctx)
			select {
			case <-grants[i].Lost:
				granted <- nil
			default:
				granted <- errors.New(name + ": B was granted while A's grant was not lost")
			}
		}()
		storetest.Await(t, 5*time.Second, "B queued", func() bool { return e.waiting(name) == 1 })
	}
	proxy.Stall() // A can no longer keep its session alive
	for range names {
		select {
		case err := <-granted:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("B was never granted")
		}
	}
}

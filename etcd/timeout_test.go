package etcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// A call to an etcd that does not answer (stopped with SIGSTOP) ends at
// the request timeout, as the store being unavailable, when the caller's
// context allows longer; and at the caller's deadline, as the caller's
// context, when that comes first.
func TestRequestTimeoutAndTheCallersDeadline(t *testing.T) {
	e := ownEnv(t)
	_, s := e.client(etcdTimeout) // 300 ms
	ctx := storetest.Context(t)
	req := request(storetest.Resource(t), "a")
	req.TTL = time.Minute // the session stays valid while etcd is stopped
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.srv.PID()
	if err := testenv.Freeze(pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Thaw(pid) })

	long, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = s.Extend(long, req, g)
	if !errors.Is(err, driver.ErrUnavailable) || long.Err() != nil {
		t.Fatalf("Extend with a minute to go, etcd stopped: %v (context: %v), want ErrUnavailable at the request timeout", err, long.Err())
	}
	if !strings.Contains(err.Error(), "no answer within the request timeout") {
		t.Errorf("Extend's error %q does not say that the request timeout ended it", err)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = s.Extend(short, req, g)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Extend with 50 ms to go, etcd stopped: %v, want the context's deadline", err)
	}
}

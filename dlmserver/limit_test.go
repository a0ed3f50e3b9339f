package dlmserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/testenv"
)

// A request refused by one of the server's limits is dlmserver.ErrLimit, which
// is also dlm.ErrUnavailable (retried with backoff), and the message names
// the bound; once a lock is released, the same request goes through.
func TestLimitRefusalIsErrLimit(t *testing.T) {
	srv := testenv.StartDLM(t, bin, "-max-locks-per-session", "1")
	c := dlm.New(dial(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := c.Acquire(ctx, "limit/a", dlm.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "limit/b", dlm.WithTTL(10*time.Second), dlm.WithRetry(dlm.NoRetry()))
	if !errors.Is(err, dlmserver.ErrLimit) || !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("second lock of a session limited to one: %v, want dlmserver.ErrLimit and dlm.ErrUnavailable", err)
	}
	if errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("a limit is not an invalid argument: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := c.Acquire(ctx, "limit/b", dlm.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

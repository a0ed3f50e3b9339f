// Package storetest is the conformance and benchmark kit that every store's
// tests use, as a database/sql driver's tests use a shared suite: helpers
// (unique resource names, bounded waits), scenarios that hold for any store
// behind a *dlm.Client, and the standard benchmark workloads.
//
// A scenario takes the clients to test and, where it needs to see inside the
// store, a small hook written by the store's tests (how many requests wait,
// whether anything was left behind). Whatever only one store has (key
// layouts, fault injection, pools) stays in that store's tests.
package storetest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
)

var resourceSeq atomic.Int64

// Resource returns a resource name unique to this test run: the test's name,
// a '/' and a sequence number.
func Resource(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), resourceSeq.Add(1))
}

// Context returns a context that ends a minute from now or when the test
// ends, whichever comes first.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Within fails the test unless ch is closed within d, and returns how long
// that took. what names the awaited event in the failure.
func Within(t testing.TB, ch <-chan struct{}, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ch:
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
		return 0
	}
}

// Await polls cond every few milliseconds until it holds, and fails the test
// if d passes first. Use it only for state that offers no event to wait on:
// a store's queue or keys (inside an external server: Redis lists, etcd keys,
// pg_locks), goroutine counts, time itself.
func Await(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Goroutines counts the goroutines whose stack mentions one of marks (such as
// "github.com/dlmhq/dlm." or "github.com/dlmhq/dlm/redis.") and no test
// code: the ones package dlm or a store still runs on its own.
func Goroutines(marks ...string) int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	count := 0
	for _, s := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(s, "_test.") || strings.Contains(s, "/internal/storetest.") {
			continue
		}
		for _, m := range marks {
			if strings.Contains(s, m) {
				count++
				break
			}
		}
	}
	return count
}

// Tokens acquires locks through one client and fails the test unless each
// grant's fencing token is above every earlier one's.
type Tokens struct {
	t    testing.TB
	ctx  context.Context
	c    *dlm.Client
	opts []dlm.Option
	last uint64
}

// NewTokens returns a Tokens over c whose every Acquire is given opts first.
func NewTokens(t testing.TB, c *dlm.Client, opts ...dlm.Option) *Tokens {
	return &Tokens{t: t, ctx: Context(t), c: c, opts: opts}
}

// Next acquires resource with the options of NewTokens and then opts, and
// checks that the grant's token is above the last one seen. what names the
// step in failures.
func (k *Tokens) Next(what, resource string, opts ...dlm.Option) *dlm.Lease {
	k.t.Helper()
	l, err := k.c.Acquire(k.ctx, resource, append(append([]dlm.Option(nil), k.opts...), opts...)...)
	if err != nil {
		k.t.Fatalf("%s: %v", what, err)
	}
	if l.Token() <= k.last {
		k.t.Fatalf("%s: token %d is not above the previous %d", what, l.Token(), k.last)
	}
	k.last = l.Token()
	return l
}

// Main is a TestMain for packages whose tests share one server: it starts
// the server with start, stores it in *shared, runs the tests, stops the
// server and exits with the tests' code.
func Main[S interface{ Stop() }](m *testing.M, shared *S, start func() (S, error)) {
	srv, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the tests' shared server:", err)
		os.Exit(1)
	}
	*shared = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// Free fails the test unless a try-lock of resource through c succeeds, and
// releases that lock again. after says what should have freed the resource.
func Free(t testing.TB, c *dlm.Client, resource, after string) {
	t.Helper()
	ctx := Context(t)
	l, err := c.Acquire(ctx, resource, dlm.WithWait(0))
	if err != nil {
		t.Fatalf("lock still held after %s: %v", after, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after %s: %v", after, err)
	}
}

// Acquiring starts c.Acquire(ctx, name, opts...) in a goroutine and
// returns the channel its lease arrives on: nil after an error, which
// fails the test.
func Acquiring(ctx context.Context, t testing.TB, c *dlm.Client, name string, opts ...dlm.Option) <-chan *dlm.Lease {
	got := make(chan *dlm.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, name, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/raftnode"
)

// locksClient returns a gRPC client of the unary API of s.
func locksClient(t *testing.T, s *Server) dlmpb.LocksClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dlmpb.NewLocksClient(conn)
}

// openUnary opens a session through the unary API and returns its handle.
func openUnary(t *testing.T, ctx context.Context, c dlmpb.LocksClient, ttl time.Duration) string {
	t.Helper()
	r, err := c.OpenSession(ctx, &dlmpb.OpenSessionRequest{Ttl: durationpb.New(ttl), Label: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetSessionId() == 0 || !strings.HasPrefix(r.GetSession(), fmt.Sprint(r.GetSessionId())+".") || r.GetTtl().AsDuration() != ttl {
		t.Fatalf("open: %v", r)
	}
	return r.GetSession()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waiters returns the number of requests queued on resource name.
func waiters(t *testing.T, s *Server, name string) int {
	t.Helper()
	r, err := s.List(context.Background(), &dlmpb.ListRequest{Prefix: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.GetResources() {
		if res.GetName() == name {
			return int(res.GetWaitingTotal() + res.GetConvertingTotal())
		}
	}
	return 0
}

func TestUnaryQueueGrantIsPushedInFIFOOrder(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	holder := openUnary(t, ctx, c, 10*time.Second)
	first, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: holder, Resource: "orders/42"})
	if err != nil || first.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED || first.GetToken() == 0 || first.GetMode() != dlmpb.Mode_MODE_EX {
		t.Fatalf("first acquire: %v, %v", first, err)
	}
	// Three waiters queue in turn; each is granted in that order, with a
	// token above the one before.
	var mu sync.Mutex
	var order []int
	tokens := map[int]uint64{}
	var wg sync.WaitGroup
	for i := range 3 {
		sess := openUnary(t, ctx, c, 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: sess, Resource: "orders/42", Wait: durationpb.New(20 * time.Second)})
			if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED {
				t.Errorf("waiter %d: %v, %v", i, r, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens[i] = r.GetToken()
			mu.Unlock()
			if _, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: sess, LockId: r.GetLockId()}); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}()
		waitFor(t, ctx, "waiter queued", func() bool { return waiters(t, s, "orders/42") == i+1 })
	}
	rel, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: holder, LockId: first.GetLockId()})
	if err != nil || rel.GetToken() != first.GetToken() {
		t.Fatalf("release: %v, %v", rel, err)
	}
	wg.Wait()
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Fatalf("grant order %v, want [0 1 2]", order)
	}
	if !(first.GetToken() < tokens[0] && tokens[0] < tokens[1] && tokens[1] < tokens[2]) {
		t.Fatalf("tokens %d then %v: not increasing", first.GetToken(), tokens)
	}
}

func TestUnaryTryLockAndWaitTimeOut(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	if _, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "job"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "job", Wait: durationpb.New(0)})
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_TIMED_OUT {
		t.Fatalf("try-lock on a held lock: %v, %v", r, err)
	}
	r, err = c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "job", Wait: durationpb.New(50 * time.Millisecond)})
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_TIMED_OUT {
		t.Fatalf("wait on a held lock: %v, %v", r, err)
	}
	if n := waiters(t, s, "job"); n != 0 {
		t.Fatalf("%d waiters left after the time-out", n)
	}
}

func TestUnaryRetriedRequestIDMakesNoSecondWaiter(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	held, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	req := &dlmpb.AcquireRequest{Session: b, Resource: "r", RequestId: "req-1", Wait: durationpb.New(20 * time.Second), Poll: durationpb.New(0)}
	var lock uint64
	for i := range 3 { // the same request, three times: one waiter
		r, err := c.Acquire(ctx, req)
		if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_QUEUED {
			t.Fatalf("try %d: %v, %v", i, r, err)
		}
		if lock != 0 && r.GetLockId() != lock {
			t.Fatalf("try %d answered lock %d, then %d", i, lock, r.GetLockId())
		}
		lock = r.GetLockId()
		if n := waiters(t, s, "r"); n != 1 {
			t.Fatalf("try %d: %d waiters, want 1", i, n)
		}
	}
	// The same id for another request is refused.
	other := &dlmpb.AcquireRequest{Session: b, Resource: "other", RequestId: "req-1"}
	_, err = c.Acquire(ctx, other)
	wantCode(t, err, codes.FailedPrecondition, "request id reused for another request")
	// The waiter keeps its place: released, the retry is granted.
	if _, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: a, LockId: held.GetLockId()}); err != nil {
		t.Fatal(err)
	}
	req.Poll = nil
	r, err := c.Acquire(ctx, req)
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED || r.GetLockId() != lock || r.GetToken() <= held.GetToken() {
		t.Fatalf("retry after the release: %v, %v", r, err)
	}
}

func TestUnaryHangUpLeavesNoWaiter(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	held, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, &dlmpb.AcquireRequest{Session: b, Resource: "r"})
		done <- err
	}()
	waitFor(t, ctx, "waiter queued", func() bool { return waiters(t, s, "r") == 1 })
	hangUp()
	wantCode(t, <-done, codes.Canceled, "the hung-up call")
	waitFor(t, ctx, "waiter withdrawn", func() bool { return waiters(t, s, "r") == 0 })
	// Released, the lock goes to nobody: a new request is granted at once.
	if _, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: a, LockId: held.GetLockId()}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r", Wait: durationpb.New(0)})
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED {
		t.Fatalf("after the withdrawal: %v, %v", r, err)
	}
}

func TestUnaryKeepAliveReportsGrantsAndBlockingNotices(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	held, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "r", Mode: dlmpb.Mode_MODE_PR, Poll: durationpb.New(0)})
	if err != nil || q.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_QUEUED {
		t.Fatalf("queued: %v, %v", q, err)
	}
	ka, err := c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: a})
	if err != nil || ka.GetTtl().AsDuration() != 10*time.Second {
		t.Fatalf("keepalive: %v, %v", ka, err)
	}
	if evs := ka.GetEvents(); len(evs) != 1 || evs[0].GetKind() != dlmpb.LockEvent_KIND_BLOCKING || evs[0].GetLockId() != held.GetLockId() || evs[0].GetMode() != dlmpb.Mode_MODE_PR {
		t.Fatalf("holder's events: %v, want one blocking notice for PR", evs)
	}
	if ka, _ := c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: a}); len(ka.GetEvents()) != 0 {
		t.Fatalf("events reported twice: %v", ka.GetEvents())
	}
	if _, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: a, LockId: held.GetLockId()}); err != nil {
		t.Fatal(err)
	}
	// The waiter's call returned QUEUED: its grant comes with its keepalive.
	var evs []*dlmpb.LockEvent
	waitFor(t, ctx, "grant reported", func() bool {
		ka, err := c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: b})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ka.GetEvents()...)
		return len(evs) > 0
	})
	if len(evs) != 1 || evs[0].GetKind() != dlmpb.LockEvent_KIND_GRANTED || evs[0].GetLockId() != q.GetLockId() || evs[0].GetToken() <= held.GetToken() || evs[0].GetMode() != dlmpb.Mode_MODE_PR {
		t.Fatalf("waiter's events: %v", evs)
	}
}

func TestUnaryExpiredSessionLosesItsLocks(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 200*time.Millisecond), openUnary(t, ctx, c, 10*time.Second)
	held, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r"})
	if err != nil {
		t.Fatal(err)
	}
	// No keepalive: b waits, and is granted once a's session expires.
	r, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "r"})
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED || r.GetToken() <= held.GetToken() {
		t.Fatalf("after the expiry: %v, %v", r, err)
	}
	_, err = c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: a})
	wantCode(t, err, codes.NotFound, "keepalive of an expired session")
	_, err = c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "x"})
	wantCode(t, err, codes.NotFound, "acquire on an expired session")
}

func TestUnarySessionHandleIsASecret(t *testing.T) {
	as := startAuthServer(t, Config{})
	c := locksClient(t, as.Server)
	ctx := testCtx(t)
	aliceCtx, bobCtx := bearer(ctx, as.tok["alice"]), bearer(ctx, as.tok["bob"])
	_, err := c.OpenSession(ctx, &dlmpb.OpenSessionRequest{})
	wantCode(t, err, codes.Unauthenticated, "open without a token")
	h := openUnary(t, aliceCtx, c, 10*time.Second)
	if _, err := c.Acquire(aliceCtx, &dlmpb.AcquireRequest{Session: h, Resource: "a/1"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(aliceCtx, &dlmpb.AcquireRequest{Session: h, Resource: "b/1"})
	wantCode(t, err, codes.PermissionDenied, "alice locking outside her prefix")
	// Another identity with the right handle, or the right identity with
	// a guessed secret, cannot use the session.
	_, err = c.KeepAlive(bobCtx, &dlmpb.KeepAliveRequest{Session: h})
	wantCode(t, err, codes.PermissionDenied, "bob using alice's session")
	id, _, _ := strings.Cut(h, ".")
	guessed := id + "." + strings.Repeat("0", 32)
	var trailer metadata.MD
	_, err = c.KeepAlive(aliceCtx, &dlmpb.KeepAliveRequest{Session: guessed}, grpc.Trailer(&trailer))
	wantCode(t, err, codes.PermissionDenied, "a guessed secret")
	if got := trailer.Get(ReasonHeader); len(got) != 1 || got[0] != "REASON_BAD_RESUME_TOKEN" {
		t.Fatalf("reason trailer %v", got)
	}
	for _, bad := range []string{"", "x", "1.", "1.zz", "0.00"} {
		_, err = c.KeepAlive(aliceCtx, &dlmpb.KeepAliveRequest{Session: bad})
		wantCode(t, err, codes.InvalidArgument, "handle "+bad)
	}
}

func TestUnaryBadInput(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	h := openUnary(t, ctx, c, 10*time.Second)
	for _, tc := range []struct {
		what string
		req  *dlmpb.AcquireRequest
		want string
	}{
		{"empty name", &dlmpb.AcquireRequest{Session: h}, "resource name is empty"},
		{"long name", &dlmpb.AcquireRequest{Session: h, Resource: strings.Repeat("n", 600)}, "512"},
		{"unknown mode", &dlmpb.AcquireRequest{Session: h, Resource: "r", Mode: 7}, "want 1 (NL) to 6 (EX)"},
		{"negative wait", &dlmpb.AcquireRequest{Session: h, Resource: "r", Wait: durationpb.New(-time.Second)}, "negative wait"},
		{"negative poll", &dlmpb.AcquireRequest{Session: h, Resource: "r", Poll: durationpb.New(-time.Second)}, "poll"},
		{"bad request id", &dlmpb.AcquireRequest{Session: h, Resource: "r", RequestId: "a b"}, "request id"},
		{"permits over capacity", &dlmpb.AcquireRequest{Session: h, Resource: "s", Capacity: 2, Permits: 3}, "permits"},
	} {
		var trailer metadata.MD
		_, err := c.Acquire(ctx, tc.req, grpc.Trailer(&trailer))
		wantCode(t, err, codes.InvalidArgument, tc.what)
		if !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: message %q does not say %q", tc.what, status.Convert(err).Message(), tc.want)
		}
		if r := trailer.Get(ReasonHeader); len(r) != 1 || !strings.HasPrefix(r[0], "REASON_") {
			t.Errorf("%s: reason trailer %v", tc.what, r)
		}
	}
	for _, ttl := range []time.Duration{0, time.Millisecond, 2 * time.Hour} {
		_, err := c.OpenSession(ctx, &dlmpb.OpenSessionRequest{Ttl: durationpb.New(ttl)})
		wantCode(t, err, codes.InvalidArgument, "ttl "+ttl.String())
	}
	_, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: h, LockId: 12345})
	wantCode(t, err, codes.NotFound, "release of an unknown lock")
}

func TestUnaryConvertAndSemaphore(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	pa, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "doc", Mode: dlmpb.Mode_MODE_PR})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "doc", Mode: dlmpb.Mode_MODE_PR, Wait: durationpb.New(0)})
	if err != nil || pb.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED {
		t.Fatalf("two readers: %v, %v", pb, err)
	}
	// a's upgrade waits for b's reader to go.
	done := make(chan *dlmpb.AcquireResponse, 1)
	go func() {
		r, err := c.Convert(ctx, &dlmpb.ConvertLockRequest{Session: a, LockId: pa.GetLockId(), Mode: dlmpb.Mode_MODE_EX})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	waitFor(t, ctx, "conversion queued", func() bool { return waiters(t, s, "doc") == 1 })
	if _, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: b, LockId: pb.GetLockId()}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED || r.GetMode() != dlmpb.Mode_MODE_EX || r.GetLockId() != pa.GetLockId() {
		t.Fatalf("conversion: %v", r)
	}
	for i, want := range []dlmpb.AcquireResponse_Outcome{dlmpb.AcquireResponse_OUTCOME_GRANTED, dlmpb.AcquireResponse_OUTCOME_GRANTED, dlmpb.AcquireResponse_OUTCOME_TIMED_OUT} {
		r, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "pool", Capacity: 2, Wait: durationpb.New(0)})
		if err != nil || r.GetOutcome() != want || (want == dlmpb.AcquireResponse_OUTCOME_GRANTED && r.GetPermits() != 1) {
			t.Fatalf("permit %d: %v, %v", i, r, err)
		}
	}
}

func TestUnaryDeadlockIsAborted(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	for _, x := range []struct{ h, r string }{{a, "x"}, {b, "y"}} {
		if _, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: x.h, Resource: x.r}); err != nil {
			t.Fatal(err)
		}
	}
	go c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "y"}) // a waits for b
	waitFor(t, ctx, "a waits", func() bool { return waiters(t, s, "y") == 1 })
	var trailer metadata.MD
	_, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "x"}, grpc.Trailer(&trailer))
	wantCode(t, err, codes.Aborted, "b waiting for a")
	if r := trailer.Get(ReasonHeader); len(r) != 1 || r[0] != "REASON_DEADLOCK" {
		t.Fatalf("reason %v", r)
	}
}

func TestUnaryCloseSessionReleases(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	if _, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "r"}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "r"})
		got <- err
	}()
	waitFor(t, ctx, "b waits", func() bool { return waiters(t, s, "r") == 1 })
	if _, err := c.CloseSession(ctx, &dlmpb.CloseSessionRequest{Session: a}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	_, err := c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: a})
	wantCode(t, err, codes.NotFound, "keepalive after close")
}

func TestGRPCHealthAndReflection(t *testing.T) {
	as := startAuthServer(t, Config{})
	conn, err := grpc.NewClient(as.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := testCtx(t)
	// No credentials needed, as for /readyz.
	for _, svc := range []string{"", "dlm.v1.DLM", "dlm.v1.Locks"} {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v, %v", svc, r, err)
		}
	}
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	wantCode(t, err, codes.NotFound, "health of an unknown service")
	// Reflection needs credentials and lists the services.
	list := func(ctx context.Context) ([]string, error) {
		st, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A stream the server has already refused fails Send with io.EOF;
		// its status comes from Recv.
		if err := st.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		r, err := st.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range r.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		return names, nil
	}
	_, err = list(ctx)
	wantCode(t, err, codes.Unauthenticated, "reflection without credentials")
	names, err := list(bearer(ctx, as.tok["bob"]))
	if err != nil || !strings.Contains(strings.Join(names, " "), "dlm.v1.Locks") {
		t.Fatalf("reflection: %v, %v", names, err)
	}
	// Closed, the server says it no longer serves.
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", r, err)
	}
	go as.Close()
	for {
		r, err := w.Recv()
		if err != nil || r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			break // NOT_SERVING, or the stream ended with the server
		}
	}
}

func TestUnaryCancelAndRetriedConversion(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a, b := openUnary(t, ctx, c, 10*time.Second), openUnary(t, ctx, c, 10*time.Second)
	pa, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "doc", Mode: dlmpb.Mode_MODE_PR})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: b, Resource: "doc", Mode: dlmpb.Mode_MODE_PR}); err != nil {
		t.Fatal(err)
	}
	// A conversion left queued (poll 0), then cancelled: the lock keeps PR.
	up := &dlmpb.ConvertLockRequest{Session: a, LockId: pa.GetLockId(), Mode: dlmpb.Mode_MODE_EX, RequestId: "up-1", Poll: durationpb.New(0)}
	r, err := c.Convert(ctx, up)
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_QUEUED {
		t.Fatalf("conversion: %v, %v", r, err)
	}
	cr, err := c.Cancel(ctx, &dlmpb.CancelLockRequest{Session: a, LockId: pa.GetLockId()})
	if err != nil || !cr.GetConversion() {
		t.Fatalf("cancel: %v, %v", cr, err)
	}
	if n := waiters(t, s, "doc"); n != 0 {
		t.Fatalf("%d queued after the cancel", n)
	}
	// Retried, the cancelled conversion is not granted: the old mode stays.
	r, err = c.Convert(ctx, up)
	if err != nil || r.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_TIMED_OUT || r.GetMode() != dlmpb.Mode_MODE_PR {
		t.Fatalf("retried conversion: %v, %v", r, err)
	}
	_, err = c.Cancel(ctx, &dlmpb.CancelLockRequest{Session: a, LockId: pa.GetLockId()})
	wantCode(t, err, codes.FailedPrecondition, "cancel with nothing queued")
}

// On a follower the unary API answers UNAVAILABLE naming the leader's
// addresses, and the health service says NOT_SERVING, as /readyz says 503.
func TestUnaryOnAFollower(t *testing.T) {
	ctx := testCtx(t)
	start := func(id string, join bool) *Server {
		s, err := Start(Config{Node: raftnode.Config{ID: id, InMemory: true, Join: join, Raft: slowRaft},
			HTTPAddr: "127.0.0.1:0", SessionMargin: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	n1 := start("node-1", false)
	if err := n1.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	n2 := start("node-2", true)
	if err := n2.Join(ctx, n1.HTTPAddr()); err != nil {
		t.Fatal(err)
	}
	// Wait until one node leads and the other knows where it serves
	// (leadership may move during the join).
	var leader, follower *Server
	waitFor(t, ctx, "a leader its follower knows", func() bool {
		for _, pair := range [][2]*Server{{n1, n2}, {n2, n1}} {
			if _, h, ok := pair[1].leaderAddrs(); ok && h == pair[0].HTTPAddr() && pair[0].Ready() && !pair[1].Ready() {
				leader, follower = pair[0], pair[1]
				return true
			}
		}
		return false
	})
	_, err := locksClient(t, follower).OpenSession(ctx, &dlmpb.OpenSessionRequest{})
	wantCode(t, err, codes.Unavailable, "open on a follower")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, leader.Addr()) || !strings.Contains(msg, leader.HTTPAddr()) {
		t.Fatalf("the follower's answer %q does not name the leader's addresses %s and %s", msg, leader.Addr(), leader.HTTPAddr())
	}
	conn, err := grpc.NewClient(follower.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("the follower's health: %v, %v", r, err)
	}
}

// A release is answered once applied: the applied state no longer has the
// lock when the answer comes, and the next keepalive's list of the
// session's locks no longer has it.
func TestUnaryReleaseAnsweredOnceApplied(t *testing.T) {
	s := startServer(t, Config{})
	c := locksClient(t, s)
	ctx := testCtx(t)
	a := openUnary(t, ctx, c, 10*time.Second)
	x, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "x"})
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: a, Resource: "y"})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: a, LockId: x.GetLockId()})
	if err != nil || rel.GetToken() != x.GetToken() {
		t.Fatalf("release: %v, %v", rel, err)
	}
	var held bool
	s.Node().FSM().Read(func(v fsm.View) { _, held = v.Table().Describe(locktable.LockID(x.GetLockId())) })
	if held {
		t.Fatalf("lock %d answered released while the applied state still holds it", x.GetLockId())
	}
	ka, err := c.KeepAlive(ctx, &dlmpb.KeepAliveRequest{Session: a})
	if err != nil {
		t.Fatal(err)
	}
	if h := ka.GetHeld(); len(h) != 1 || h[0] != y.GetLockId() {
		t.Fatalf("held %v, want only y's lock %d", h, y.GetLockId())
	}
	// Released again, the lock is unknown: harmless for a client that
	// re-releases what it finds listed.
	_, err = c.Release(ctx, &dlmpb.ReleaseLockRequest{Session: a, LockId: x.GetLockId()})
	wantCode(t, err, codes.NotFound, "a second release")
}

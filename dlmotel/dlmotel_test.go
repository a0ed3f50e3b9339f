package dlmotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmotel"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/memory"
)

// tracedStore is a memory store instrumented the way a real store's client
// library would be: each call opens a span from the context it is given.
type tracedStore struct {
	*memory.Store
	tracer     trace.Tracer
	releaseErr error // returned by Release instead of releasing, if set
}

func (s *tracedStore) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ctx, span := s.tracer.Start(ctx, "store.acquire")
	defer span.End()
	return s.Store.Acquire(ctx, req)
}

func (s *tracedStore) AcquireWait(ctx context.Context, req driver.Request) (driver.Grant, error) {
	ctx, span := s.tracer.Start(ctx, "store.acquire_wait")
	defer span.End()
	return s.Store.AcquireWait(ctx, req)
}

func (s *tracedStore) Release(ctx context.Context, req driver.Request, g driver.Grant) error {
	ctx, span := s.tracer.Start(ctx, "store.release")
	defer span.End()
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, req, g)
}

type fixture struct {
	rec   *tracetest.SpanRecorder
	tp    *sdktrace.TracerProvider
	store *tracedStore
	c     *dlm.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	store := &tracedStore{Store: memory.New(), tracer: tp.Tracer("store")}
	return &fixture{rec: rec, tp: tp, store: store, c: dlm.New(store, dlm.WithTracer(dlmotel.New(tp)))}
}

// ended returns the ended spans named name.
func (f *fixture) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name.
func (f *fixture) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := f.ended(name)
	if len(spans) != 1 {
		t.Fatalf("%d ended %q spans, want 1; all: %v", len(spans), name, names(f.rec.Ended()))
	}
	return spans[0]
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks that s has the attributes want (as their String forms)
// and none of the keys in absent.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]string, absent ...attribute.Key) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[k]; !ok || g.String() != v {
			t.Errorf("%s: attribute %s = %q (present %v), want %q", s.Name(), k, g.String(), ok, v)
		}
	}
	for _, k := range absent {
		if g, ok := got[k]; ok {
			t.Errorf("%s: attribute %s = %q, want none", s.Name(), k, g.String())
		}
	}
}

func wantChild(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%s: parent %s, want %s (%s)", child.Name(), child.Parent().SpanID(), parent.SpanContext().SpanID(), parent.Name())
	}
}

func TestOtelAcquireReleaseUnderCallerSpan(t *testing.T) {
	f := newFixture(t)
	ctx, parent := f.tp.Tracer("test").Start(context.Background(), "caller")
	l, err := f.c.Acquire(ctx, "orders/42", dlm.WithWait(0), dlm.WithMode(dlm.PR))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil { // not traced: nothing to do
		t.Fatal(err)
	}
	parent.End()

	caller := f.one(t, "caller")
	acq := f.one(t, dlmotel.SpanAcquire)
	rel := f.one(t, dlmotel.SpanRelease)
	token := fmt.Sprint(l.Token())
	for _, s := range []sdktrace.ReadOnlySpan{acq, rel} {
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %s, want client", s.Name(), s.SpanKind())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("%s: status %v, want unset", s.Name(), s.Status())
		}
		if len(s.Events()) != 0 {
			t.Errorf("%s: events %v, want none", s.Name(), s.Events())
		}
		if s.InstrumentationScope().Name != dlmotel.ScopeName {
			t.Errorf("%s: scope %q", s.Name(), s.InstrumentationScope().Name)
		}
		wantChild(t, s, caller)
	}
	wantAttrs(t, acq, map[attribute.Key]string{
		dlmotel.AttrStore: "memory", dlmotel.AttrResource: "orders/42", dlmotel.AttrMode: "PR",
		dlmotel.AttrToken: token, dlmotel.AttrOutcome: "acquired",
	})
	if v := attrs(acq)[dlmotel.AttrToken]; v.Type() != attribute.INT64 || v.AsInt64() == 0 {
		t.Errorf("token attribute %v of type %s, want a non-zero int64", v.String(), v.Type())
	}
	wantAttrs(t, rel, map[attribute.Key]string{
		dlmotel.AttrStore: "memory", dlmotel.AttrResource: "orders/42", dlmotel.AttrMode: "PR",
		dlmotel.AttrToken: token,
	}, dlmotel.AttrOutcome)

	// The store's own spans nest under the dlm spans.
	wantChild(t, f.one(t, "store.acquire"), acq)
	wantChild(t, f.one(t, "store.release"), rel)
}

func TestOtelRootSpanWithoutCallerSpan(t *testing.T) {
	f := newFixture(t)
	l, err := f.c.Acquire(context.Background(), "r", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	acq := f.one(t, dlmotel.SpanAcquire)
	if acq.Parent().IsValid() {
		t.Errorf("acquire span has parent %s, want a root span", acq.Parent().SpanID())
	}
	wantChild(t, f.one(t, "store.acquire"), acq)
}

func TestOtelContendedTryLock(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	held, err := f.c.Acquire(ctx, "r", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	f.rec.Reset()

	_, err = f.c.Acquire(ctx, "r", dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("second acquire: %v, want ErrNotAcquired", err)
	}
	acq := f.one(t, dlmotel.SpanAcquire)
	wantAttrs(t, acq, map[attribute.Key]string{
		dlmotel.AttrStore: "memory", dlmotel.AttrResource: "r", dlmotel.AttrMode: "EX",
		dlmotel.AttrOutcome: "contended",
	}, dlmotel.AttrToken)
	if acq.Status().Code != codes.Unset || len(acq.Events()) != 0 {
		t.Errorf("contended acquire: status %v, events %v; want unset, none", acq.Status(), acq.Events())
	}
}

func TestOtelContendedWaitSpansTheWait(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	held, err := f.c.Acquire(ctx, "r", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	f.rec.Reset()

	const wait = 30 * time.Millisecond
	if _, err := f.c.Acquire(ctx, "r", dlm.WithWait(wait)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("acquire: %v, want ErrNotAcquired", err)
	}
	acq := f.one(t, dlmotel.SpanAcquire)
	if d := acq.EndTime().Sub(acq.StartTime()); d < wait {
		t.Errorf("acquire span lasted %s, want at least the wait", d)
	}
	wantAttrs(t, acq, map[attribute.Key]string{dlmotel.AttrOutcome: "contended"})
	wantChild(t, f.one(t, "store.acquire_wait"), acq)
}

func TestOtelInvalidNameIsError(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Acquire(context.Background(), "", dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("acquire: %v, want ErrInvalid", err)
	}
	acq := f.one(t, dlmotel.SpanAcquire)
	wantAttrs(t, acq, map[attribute.Key]string{dlmotel.AttrResource: "", dlmotel.AttrOutcome: "failed"}, dlmotel.AttrToken)
	wantError(t, acq, err)
	if n := len(f.ended("store.acquire")); n != 0 {
		t.Errorf("%d store calls for an invalid call", n)
	}
}

func TestOtelReleaseErrorIsError(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l, err := f.c.Acquire(ctx, "r", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	f.store.releaseErr = fmt.Errorf("%w: connection refused", dlm.ErrUnavailable)
	err = l.Release(ctx)
	if !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("release: %v, want ErrUnavailable", err)
	}
	rel := f.one(t, dlmotel.SpanRelease)
	wantError(t, rel, err)
	f.store.releaseErr = nil
	if err := l.Release(ctx); err != nil { // may be called again
		t.Fatal(err)
	}
	if n := len(f.ended(dlmotel.SpanRelease)); n != 2 {
		t.Errorf("%d release spans, want 2", n)
	}
}

func wantError(t *testing.T, s sdktrace.ReadOnlySpan, err error) {
	t.Helper()
	if s.Status().Code != codes.Error || s.Status().Description != err.Error() {
		t.Errorf("%s: status %v, want Error %q", s.Name(), s.Status(), err)
	}
	var recorded bool
	for _, e := range s.Events() {
		for _, kv := range e.Attributes {
			if e.Name == "exception" && kv.Key == "exception.message" && kv.Value.AsString() == err.Error() {
				recorded = true
			}
		}
	}
	if !recorded {
		t.Errorf("%s: error not recorded; events %v", s.Name(), s.Events())
	}
}

func TestOtelDo(t *testing.T) {
	f := newFixture(t)
	ctx, parent := f.tp.Tracer("test").Start(context.Background(), "caller")
	err := f.c.Do(ctx, "job", func(ctx context.Context, l *dlm.Lease) error {
		if trace.SpanFromContext(ctx).SpanContext().SpanID() != parent.SpanContext().SpanID() {
			t.Error("the function's context does not carry the caller's span")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	caller := f.one(t, "caller")
	wantChild(t, f.one(t, dlmotel.SpanAcquire), caller)
	wantChild(t, f.one(t, dlmotel.SpanRelease), caller)
}

func TestOtelNilProviderUsesGlobal(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	c := dlm.New(memory.New(), dlm.WithTracer(dlmotel.New(nil)))
	l, err := c.Acquire(context.Background(), "r", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	if got := names(rec.Ended()); strings.Join(got, ",") != "dlm.acquire,dlm.release" {
		t.Errorf("spans %v, want dlm.acquire, dlm.release", got)
	}
}

// A fencing token beyond int64 is recorded as its decimal string rather
// than wrapped to a negative number.
func TestOtelHugeToken(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr := dlmotel.New(tp)
	_, end := tr.StartRelease(context.Background(), "s", "r", dlm.EX, math.MaxUint64)
	end(nil)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	v := attrs(spans[0])[dlmotel.AttrToken]
	if v.Type() != attribute.STRING || v.AsString() != "18446744073709551615" {
		t.Errorf("token attribute %s %q", v.Type(), v.String())
	}
}

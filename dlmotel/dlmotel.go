// Package dlmotel traces the dlm client's Acquire and Release calls as
// OpenTelemetry spans.
//
// Enable it with the client option dlm.WithTracer:
//
//	c := dlm.New(store, dlm.WithTracer(dlmotel.New(nil))) // nil: the global provider
//
// or pass a trace.TracerProvider of your own instead of nil. Without
// WithTracer the client traces nothing and pays nothing for it.
//
// The spans, both of kind client:
//
//	dlm.acquire  one Acquire call (or the acquire of a Do), waiting and
//	             retries included
//	dlm.release  one Release of a held lease
//
// with the attributes
//
//	dlm.store     the store's name, such as "redis"
//	dlm.resource  the resource name
//	dlm.mode      the lock mode, such as "EX"
//	dlm.token     the fencing token (acquire: when granted)
//	dlm.outcome   acquire only: acquired, contended or failed
//
// A failed call (outcome failed, or a Release that returns an error) has
// the status Error and its error recorded as an exception event. Contention
// is not a failure: a contended acquire keeps the status Unset and is told
// apart by its outcome. The spans are started from the caller's context, so
// they nest under the caller's span, and the store's calls run with the
// span's context, so a store's own instrumentation (a Redis or gRPC client,
// say) nests under them.
package dlmotel

import (
	"context"
	"math"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlmhq/dlm"
)

// ScopeName is the instrumentation scope of the spans: the name of the
// tracer obtained from the TracerProvider.
const ScopeName = "github.com/dlmhq/dlm/dlmotel"

// Span names and attribute keys.
const (
	SpanAcquire = "dlm.acquire"
	SpanRelease = "dlm.release"

	AttrStore    = attribute.Key("dlm.store")
	AttrResource = attribute.Key("dlm.resource")
	AttrMode     = attribute.Key("dlm.mode")
	AttrToken    = attribute.Key("dlm.token")
	AttrOutcome  = attribute.Key("dlm.outcome")
)

// tracer implements dlm.Tracer with an OpenTelemetry tracer.
type tracer struct {
	t trace.Tracer
}

var _ dlm.Tracer = tracer{}

// New returns a dlm.Tracer that records spans with a tracer of tp, or of
// the global provider (otel.GetTracerProvider) when tp is nil. The global
// provider may be set after New: it forwards to the one set later.
func New(tp trace.TracerProvider) dlm.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tracer{t: tp.Tracer(ScopeName)}
}

// StartAcquire implements dlm.Tracer.
func (t tracer) StartAcquire(ctx context.Context, store, resource string, mode dlm.Mode) (context.Context, func(uint64, dlm.Outcome, error)) {
	ctx, span := t.t.Start(ctx, SpanAcquire,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			AttrStore.String(store),
			AttrResource.String(resource),
			AttrMode.String(mode.String()),
		))
	return ctx, func(token uint64, outcome dlm.Outcome, err error) {
		span.SetAttributes(AttrOutcome.String(string(outcome)))
		if outcome == dlm.OutcomeAcquired {
			span.SetAttributes(tokenAttr(token))
		}
		if outcome == dlm.OutcomeFailed && err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// StartRelease implements dlm.Tracer.
func (t tracer) StartRelease(ctx context.Context, store, resource string, mode dlm.Mode, token uint64) (context.Context, func(error)) {
	ctx, span := t.t.Start(ctx, SpanRelease,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			AttrStore.String(store),
			AttrResource.String(resource),
			AttrMode.String(mode.String()),
			tokenAttr(token),
		))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// tokenAttr returns the dlm.token attribute: an int64, or, for a token
// beyond the range of int64 (which no store reaches in practice), its
// decimal string.
func tokenAttr(token uint64) attribute.KeyValue {
	if token > math.MaxInt64 {
		return AttrToken.String(strconv.FormatUint(token, 10))
	}
	return AttrToken.Int64(int64(token))
}

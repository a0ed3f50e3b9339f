package dlmotel_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmotel"
	"github.com/dlmhq/dlm/memory"
)

// Pass dlmotel.New to dlm.WithTracer. A program usually passes nil, for the
// global provider it set up with otel.SetTracerProvider; this example
// records the spans in memory to print them.
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	locks := dlm.New(memory.New(), dlm.WithTracer(dlmotel.New(tp)))
	err := locks.Do(context.Background(), "invoice/42", func(ctx context.Context, l *dlm.Lease) error {
		return nil // the work, under the lock
	})
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), s.SpanKind())
	}
	// Output:
	// dlm.acquire client
	// dlm.release client
}

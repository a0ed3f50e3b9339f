package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A grant answered to a unary call is the client's only once the client
// has heard it. The call decides at its end: a caller gone by then (its
// context ended) gets an error and the grant is withdrawn (see answer and
// await). What can still go wrong is the answer's delivery, after the call
// returned: the client hangs up while the answer is written. Each
// transport reports that here: the call records its grant in the
// context's delivery, and the transport, once it has sent the answer,
// withdraws the grant if the sending failed or the client was gone by
// then. What no server can see (an answer written to the connection that
// the client closes unread) is for the client to settle: it asks again
// with the same request_id, and hears the grant or that its lock is gone
// (docs/any-language.md).

// delivery is the grant a unary call answered, until its transport has
// sent the answer.
type delivery struct {
	mu       sync.Mutex
	withdraw func() // takes the grant back; nil when nothing was granted
}

type deliveryKey struct{}

// withDelivery returns ctx with a fresh delivery, for a transport that
// will report whether the answer of the call reached its client.
func withDelivery(ctx context.Context) (context.Context, *delivery) {
	d := &delivery{}
	return context.WithValue(ctx, deliveryKey{}, d), d
}

// recordGrant records that the call of ctx answered a grant that withdraw
// takes back; a transport that does not report delivery has no delivery
// in ctx, and nothing is recorded.
func recordGrant(ctx context.Context, withdraw func()) {
	if d, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
		d.mu.Lock()
		d.withdraw = withdraw
		d.mu.Unlock()
	}
}

// undelivered withdraws the recorded grant, if any: its answer did not
// reach the client.
func (d *delivery) undelivered() {
	d.mu.Lock()
	w := d.withdraw
	d.withdraw = nil
	d.mu.Unlock()
	if w != nil {
		w()
	}
}

// deliveryStats is the gRPC stats handler that reports the delivery of
// the unary API's Acquire and Convert answers: a call whose answer could
// not be sent (the client cancelled, or the connection broke, after the
// handler returned) ends with an error, and its grant is withdrawn.
type deliveryStats struct{}

var deliveredMethods = map[string]bool{
	"/" + dlmpb.Locks_ServiceDesc.ServiceName + "/Acquire": true,
	"/" + dlmpb.Locks_ServiceDesc.ServiceName + "/Convert": true,
}

func (deliveryStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !deliveredMethods[info.FullMethodName] {
		return ctx
	}
	ctx, _ = withDelivery(ctx)
	return ctx
}

func (deliveryStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Error == nil {
		return
	}
	if d, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
		d.undelivered()
	}
}

func (deliveryStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (deliveryStats) HandleConn(context.Context, stats.ConnStats) {}

// deliverHTTP runs h, the unary API in the Connect protocol, for a call
// whose answer's delivery is reported: once h has written the answer it is
// flushed to the connection, and if that fails, or the client hung up
// meanwhile, the call's grant is withdrawn.
func deliverHTTP(h http.Handler, w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/Acquire") && !strings.HasSuffix(r.URL.Path, "/Convert") {
		h.ServeHTTP(w, r)
		return
	}
	ctx, d := withDelivery(r.Context())
	h.ServeHTTP(w, r.WithContext(ctx))
	err := http.NewResponseController(w).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) || r.Context().Err() != nil {
		d.undelivered()
	}
}

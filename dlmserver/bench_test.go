package dlmserver_test

import (
	"testing"

	"github.com/dlmhq/dlm/dlmserver"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// go test -run '^$' -bench . -benchtime 2s ./dlmserver/
//
// Each benchmark runs against the shared durable server (an fsync per Raft
// entry) and against a server with an in-memory log.

// modes runs fn against a durable and an in-memory server, with the
// session over the session transport (the default) and over gRPC.
func modes(b *testing.B, fn func(b *testing.B, c *dlm.Client)) {
	grpc := dlmserver.WithTransport(dlmserver.TransportGRPC)
	b.Run("durable", func(b *testing.B) {
		c, _ := newClient(b)
		fn(b, c)
	})
	b.Run("durable-grpc", func(b *testing.B) {
		c, _ := newClient(b, grpc)
		fn(b, c)
	})
	srv := testenv.StartDLM(b, bin, "-in-memory")
	b.Run("in-memory", func(b *testing.B) { fn(b, dlm.New(dial(b, srv.Addr()))) })
	b.Run("in-memory-grpc", func(b *testing.B) { fn(b, dlm.New(dial(b, srv.Addr(), grpc))) })
}

func BenchmarkUncontended(b *testing.B) { modes(b, storetest.Uncontended) }

func BenchmarkParallelDistinctKeys(b *testing.B) { modes(b, storetest.ParallelDistinctKeys) }

func BenchmarkContendedHandoff(b *testing.B) {
	modes(b, func(b *testing.B, c *dlm.Client) { storetest.ContendedHandoff(b, c) })
}

// BenchmarkRoundTrip measures what bounds the figures above: one round trip
// to the server process over gRPC, with no lock work: a unary Status call,
// and a keepalive on an open session stream (answered once leadership is
// confirmed).
func BenchmarkRoundTrip(b *testing.B) {
	pb := newLister(b, shared.Addr()).pb
	ctx := b.Context()
	b.Run("status", func(b *testing.B) {
		for b.Loop() {
			if _, err := pb.Status(ctx, &dlmpb.StatusRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("keepalive", func(b *testing.B) {
		st, err := pb.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		keepalives(b, st)
	})
	b.Run("keepalive-tcp", func(b *testing.B) {
		w, err := testenv.DialWire(ctx, shared.Addr(), nil, "")
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		keepalives(b, w)
	})
}

// sessionStream is a session stream over gRPC or the session transport.
type sessionStream interface {
	Send(*dlmpb.SessionRequest) error
	Recv() (*dlmpb.SessionResponse, error)
}

// keepalives opens a session on st and measures a keepalive's round trip.
func keepalives(b *testing.B, st sessionStream) {
	if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{}}}); err != nil {
		b.Fatal(err)
	}
	for range 2 { // SessionOpened, SessionSync
		if _, err := st.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	for i := uint64(1); b.Loop(); i++ {
		if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_KeepAlive{KeepAlive: &dlmpb.KeepAlive{Seq: i}}}); err != nil {
			b.Fatal(err)
		}
		if m, err := st.Recv(); err != nil || m.GetKeepAliveAck().GetSeq() != i {
			b.Fatalf("ack %v, %v", m, err)
		}
	}
	st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Close{Close: &dlmpb.CloseRequest{}}})
}

package dlmserver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// The session stream over gRPC (TransportGRPC) behaves as over the session
// transport, the default, which every other test of the package uses.
func TestTransportGRPC(t *testing.T) {
	grpc := dlmserver.WithTransport(dlmserver.TransportGRPC)
	c1, _ := newClient(t, grpc)
	c2, _ := newClient(t)
	t.Run("mutual exclusion across transports", func(t *testing.T) {
		storetest.MutualExclusion(t, []*dlm.Client{c1, c2}, 16, 20)
	})
	t.Run("FIFO", func(t *testing.T) {
		storetest.FIFOHandoff(t, c1, 8, newLister(t, shared.Addr()).waiting)
	})
	t.Run("bad input", func(t *testing.T) { storetest.BadInput(t, c1) })
}

func TestNoGoroutineLeakGRPC(t *testing.T) {
	s, err := dlmserver.Dial(t.Context(), shared.Addr(), dlmserver.WithTransport(dlmserver.TransportGRPC))
	if err != nil {
		t.Fatal(err)
	}
	storetest.NoGoroutineLeak(t, dlm.New(s), 8, func() { s.Close(context.Background()) },
		"github.com/dlmhq/dlm.", "github.com/dlmhq/dlm/dlmserver.", "google.golang.org/grpc")
}

func TestUnknownTransportIsRefused(t *testing.T) {
	_, err := dlmserver.Dial(t.Context(), shared.Addr(), dlmserver.WithTransport(dlmserver.Transport(7)))
	if !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("Dial with transport 7: %v, want ErrInvalid", err)
	}
}

func TestTransportString(t *testing.T) {
	for tr, want := range map[dlmserver.Transport]string{dlmserver.TransportTCP: "tcp", dlmserver.TransportGRPC: "grpc", 7: "Transport(7)"} {
		if got := tr.String(); got != want {
			t.Errorf("%d: %q, want %q", int(tr), got, want)
		}
	}
}

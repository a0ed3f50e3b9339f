package dlmserver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
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

// grpcOnlyProxy forwards to addr the connections that open as HTTP/2 does
// (gRPC in plaintext), and closes the others, as a proxy that carries only
// gRPC would. It returns its address.
func grpcOnlyProxy(t *testing.T, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				head := make([]byte, 4)
				if _, err := io.ReadFull(c, head); err != nil || string(head) != "PRI " {
					return // not HTTP/2: refused
				}
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				if _, err := up.Write(head); err != nil {
					return
				}
				done := make(chan struct{})
				go func() { _, _ = io.Copy(c, up); c.Close(); close(done) }()
				_, _ = io.Copy(up, c)
				up.Close()
				<-done
			})
		}
	})
	return l.Addr().String()
}

// Behind a proxy that carries only gRPC, the default transport finds the
// session transport unanswered and carries the session over gRPC there;
// a store that reaches the server directly keeps the session transport.
func TestTransportFallsBackToGRPC(t *testing.T) {
	var viaProxy, direct syncBuffer
	proxied := dial(t, grpcOnlyProxy(t, shared.Addr()), dlmserver.WithLogger(slog.New(slog.NewTextHandler(&viaProxy, nil))))
	straight := dial(t, shared.Addr(), dlmserver.WithLogger(slog.New(slog.NewTextHandler(&direct, nil))))
	storetest.MutualExclusion(t, []*dlm.Client{dlm.New(proxied), dlm.New(straight)}, 8, 10)
	const note = "the session transport is not served at this address"
	if !strings.Contains(viaProxy.String(), note) {
		t.Fatalf("the store behind the proxy did not say it went over gRPC:\n%s", viaProxy.String())
	}
	if strings.Contains(direct.String(), note) {
		t.Fatalf("the store without a proxy went over gRPC:\n%s", direct.String())
	}
}

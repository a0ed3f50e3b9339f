package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/storeurl"
)

var dlmBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testenv.BuildDLM()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dlmBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// exclusive opens url twice (two clients, as two processes would) and
// checks that the second cannot take a lock the first holds, then that it
// can once the first released it.
func exclusive(t *testing.T, url string, want storeurl.Kind) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var clients [2]*dlm.Client
	for i := range clients {
		s, err := storeurl.Open(ctx, url, storeurl.WithLabel("storeurl test"))
		if err != nil {
			t.Fatalf("Open(%s): %v", storeurl.Redact(url), err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		if s.Kind() != want || strings.Contains(s.String(), "s3cret") {
			t.Fatalf("store %s of kind %s, want %s without the password", s, s.Kind(), want)
		}
		clients[i] = dlm.New(s.Driver())
	}
	name := strings.ReplaceAll(t.Name(), "/", "-")
	l, err := clients[0].Acquire(ctx, name, dlm.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clients[1].Acquire(ctx, name, dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("second client while held: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := clients[1].Acquire(ctx, name, dlm.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("second client after release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token went from %d to %d", l.Token(), l2.Token())
	}
	l2.Release(ctx)
}

func TestOpenEveryKind(t *testing.T) {
	t.Run("dlm", func(t *testing.T) {
		srv := testenv.StartDLM(t, dlmBin, "-in-memory")
		// The first address is dead: Open goes on to the next.
		dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		exclusive(t, "dlm://"+dead+","+srv.Addr()+"?session_ttl=2s", storeurl.KindDLM)
		exclusive(t, "dlm://"+srv.Addr()+"?transport=grpc", storeurl.KindDLM)
		exclusive(t, "dlm://"+srv.Addr()+"?transport=tcp", storeurl.KindDLM)
		if _, err := storeurl.Open(t.Context(), "dlm://"+srv.Addr()+"?transport=udp"); !errors.Is(err, storeurl.ErrBadURL) {
			t.Fatalf("transport=udp: %v, want ErrBadURL", err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		r := testenv.StartRedis(t)
		exclusive(t, "redis://"+r.Addr()+"/3?prefix=t:&queue_refresh=100ms", storeurl.KindRedis)
	})
	t.Run("redlock", func(t *testing.T) {
		a, b, c := testenv.StartRedis(t), testenv.StartRedis(t), testenv.StartRedis(t)
		exclusive(t, "redlock://"+a.Addr()+","+b.Addr()+","+c.Addr()+"?drift=0.02&node_timeout=40ms", storeurl.KindRedlock)
	})
	t.Run("postgres", func(t *testing.T) {
		p := testenv.StartPostgres(t)
		exclusive(t, p.DSN()+"&sequence=storeurl_fence", storeurl.KindPostgres)
	})
	t.Run("etcd", func(t *testing.T) {
		e := testenv.StartEtcd(t)
		exclusive(t, "etcd://"+strings.TrimPrefix(e.Endpoint(), "http://")+"?prefix=t/", storeurl.KindEtcd)
	})
}

func TestOpenUnreachableDLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	_, err := storeurl.Open(ctx, "dlm://"+dead)
	if !errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("Open of a dead server: %v, want ErrUnavailable", err)
	}
}

// A dlm server that is down (a closed port) or does not answer (a listener
// that never reads) fails Open with one line naming the server, which
// matches dlm.ErrUnavailable.
func TestOpenUnreachableIsOneLine(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // never accepted: the kernel completes the handshakes, nobody reads
	silent := ln.Addr().String()
	for addr, want := range map[string]string{
		closed: "dlm server " + closed + " refused the connection",
		silent: "dlm server " + silent + " did not answer within ",
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		s, err := storeurl.Open(ctx, "dlm://"+addr)
		cancel()
		if err == nil {
			s.Close(context.Background())
			t.Fatalf("Open %s: no error", addr)
		}
		var ue *storeurl.UnreachableError
		if !errors.Is(err, dlm.ErrUnavailable) || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), want) ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("Open %s: %q, want one line starting %q, matching ErrUnavailable", addr, err, want)
		}
	}
}

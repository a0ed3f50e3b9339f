package postgres_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/postgres"
)

func TestPoolerDetected(t *testing.T) {
	e := newEnv(t)
	ctx := storetest.Context(t)
	name := storetest.Resource(t)
	p := fakePooler(t, e.srv.Addr())

	_, err := dlm.New(newStore(t, p)).Acquire(ctx, name, dlm.WithWait(0))
	if !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("lock through a pooler = %v, want ErrUnsupported", err)
	}
	if n := e.locks(name, true); n != 0 {
		t.Fatalf("the rejected grant left %d locks", n)
	}
	_, err = dlm.New(newStore(t, p)).Acquire(ctx, name, dlm.WithWait(time.Second))
	if !errors.Is(err, dlm.ErrUnsupported) {
		t.Fatalf("waiting lock through a pooler = %v, want ErrUnsupported", err)
	}

	// Session pooling keeps one backend per client connection: allowed on
	// request, with the backend still checked by Extend and Release.
	c := dlm.New(newStore(t, p, postgres.WithPoolerCheck(false)))
	l, err := c.Acquire(ctx, name, dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// fakePooler returns a pool whose connections pass through a proxy that,
// like PgBouncer, reports a process id of its own in BackendKeyData.
func fakePooler(t *testing.T, server string) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			backend, err := net.Dial("tcp", server)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(backend)
			wg.Add(2)
			go func() {
				defer wg.Done()
				io.Copy(backend, client)
				backend.Close()
			}()
			go func() {
				defer wg.Done()
				rewritePID(client, backend)
				client.Close()
			}()
		}
	}()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		closePool(t, p)
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// rewritePID copies the server's messages to the client, changing the
// process id in BackendKeyData ('K').
func rewritePID(dst io.Writer, src io.Reader) {
	head := make([]byte, 5)
	for {
		if _, err := io.ReadFull(src, head); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(src, body); err != nil {
			return
		}
		if head[0] == 'K' && len(body) >= 4 {
			pid := binary.BigEndian.Uint32(body)
			binary.BigEndian.PutUint32(body, pid^0x5a5a)
		}
		if _, err := dst.Write(append(head, body...)); err != nil {
			return
		}
	}
}

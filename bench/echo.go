package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The round trips between two processes: what a client pays to reach a
// server on the same machine before the server does any work. The bench
// starts itself again as an echo server (echoEnv set), once over plain TCP
// and once over a gRPC bidirectional stream, the transport of dlm's
// session stream, and measures one small message there and back.

// echoEnv makes the bench command an echo server: "tcp" or "grpc". It
// prints its address and serves until its standard input closes.
const echoEnv = "DLM_BENCH_ECHO"

// rawCodec carries []byte messages through gRPC unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	p := v.(*[]byte)
	*p = append((*p)[:0], b...)
	return nil
}
func (rawCodec) Name() string { return "dlm-bench-raw" }

// echoStream is the one method of the gRPC echo service.
var echoStream = grpc.StreamDesc{StreamName: "Echo", ServerStreams: true, ClientStreams: true}

// serveEcho runs the echo server of kind and returns when stdin closes.
func serveEcho(kind string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	switch kind {
	case "tcp":
		go echoTCP(l)
	case "grpc":
		desc := echoStream
		desc.Handler = func(_ any, st grpc.ServerStream) error {
			var m []byte
			for {
				if err := st.RecvMsg(&m); err != nil {
					return nil
				}
				if err := st.SendMsg(&m); err != nil {
					return err
				}
			}
		}
		srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
		srv.RegisterService(&grpc.ServiceDesc{ServiceName: "bench.Echo", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{desc}}, nil)
		go srv.Serve(l)
		defer srv.Stop()
	default:
		return fmt.Errorf("%s=%q: want tcp or grpc", echoEnv, kind)
	}
	fmt.Println(l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// startEcho starts this program again as an echo server of kind and
// returns its address and a function that stops it.
func startEcho(kind string) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), echoEnv+"="+kind)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the %s echo server: %w", kind, err)
	}
	return strings.TrimSpace(addr), stop, nil
}

// echoTCP echoes what every connection accepted on l sends, until l
// closes.
func echoTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// processTCPP50 returns the median round trip of a 32-byte message to
// another process over TCP.
func processTCPP50(n int) (time.Duration, error) {
	addr, stop, err := startEcho("tcp")
	if err != nil {
		return 0, err
	}
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return echoRoundTrips(n, c)
}

// processGRPCP50 returns the median round trip of a 32-byte message to
// another process on a gRPC bidirectional stream.
func processGRPCP50(n int) (time.Duration, error) {
	addr, stop, err := startEcho("grpc")
	if err != nil {
		return 0, err
	}
	defer stop()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return 0, err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(ctx, &echoStream, "/bench.Echo/Echo")
	if err != nil {
		return 0, err
	}
	m, r := make([]byte, 32), []byte(nil)
	return medianOf(n, func() error {
		if err := st.SendMsg(&m); err != nil {
			return err
		}
		if err := st.RecvMsg(&r); err != nil {
			return err
		}
		if len(r) != len(m) {
			return errors.New("the gRPC echo answered a different message")
		}
		return nil
	})
}

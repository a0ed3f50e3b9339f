// Command memprobe measures what a dlm server's memory costs per open
// session stream and per lock, as an outside client sees it: it starts
// `dlm server` (durable, the default) on free loopback ports, reads the
// process's resident set (VmRSS in /proc/PID/status) while idle, after
// opening -sessions session streams, and after taking -locks exclusive locks
// on distinct resources, and prints the differences.
//
//	go run ./internal/memprobe -sessions 1000 -locks 100000
//
// It targets 127.0.0.1 only and stops the server when it ends. RSS includes
// memory the Go runtime has not returned to the system yet, so the figures
// are an upper bound of what the state itself needs.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "memprobe:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("memprobe", flag.ContinueOnError)
	bin := fs.String("dlm", "", "dlm binary (default: build ./cmd/dlm)")
	sessions := fs.Int("sessions", 1000, "session streams to open")
	locks := fs.Int("locks", 100_000, "locks to take, 10,000 per session (at most sessions x 10,000)")
	conns := fs.Int("conns", 8, "gRPC connections the streams share (-transport grpc)")
	transport := fs.String("transport", "tcp", "how the session streams go: tcp (the session transport, one connection each) or grpc")
	meta := fs.Int("metadata", 0, "bytes of metadata per lock")
	inMemory := fs.Bool("in-memory", false, "run the server with -in-memory")
	logStore := fs.String("log-store", "", "run the server with -log-store (wal or bolt; default the server's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	const perSession = 10_000
	if *sessions < 1 || *locks < 0 || *locks > *sessions*perSession || *conns < 1 || *meta < 0 || *meta > 1024 ||
		(*transport != "tcp" && *transport != "grpc") {
		return errors.New("want -sessions >= 1, 0 <= -locks <= sessions x 10,000, -conns >= 1, 0 <= -metadata <= 1024, -transport tcp or grpc")
	}
	if *bin == "" {
		b, cleanup, err := testenv.BuildDLM()
		if err != nil {
			return err
		}
		defer cleanup()
		*bin = b
	}
	var extra []string
	if *inMemory {
		extra = append(extra, "-in-memory")
	}
	if *logStore != "" {
		extra = append(extra, "-log-store", *logStore)
	}
	srv, err := testenv.NewDLM(*bin, extra...)
	if err != nil {
		return err
	}
	defer srv.Stop()

	idle, err := measure(ctx, srv)
	if err != nil {
		return err
	}
	clients := make([]dlmpb.DLMClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		clients[i] = dlmpb.NewDLMClient(cc)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]stream, *sessions)
	start := time.Now()
	for i := range streams {
		var st stream
		var err error
		if *transport == "tcp" {
			st, err = testenv.DialWire(sctx, srv.Addr(), nil, "")
		} else {
			st, err = clients[i%len(clients)].Session(sctx)
		}
		if err != nil {
			return err
		}
		if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{
			Ttl: durationpb.New(time.Hour), Label: "memprobe " + strconv.Itoa(i),
		}}}); err != nil {
			return err
		}
		for range 2 { // opened, sync
			if _, err := st.Recv(); err != nil {
				return fmt.Errorf("open session %d: %w", i, err)
			}
		}
		streams[i] = st
	}
	opened := time.Since(start)
	withSessions, err := measure(ctx, srv)
	if err != nil {
		return err
	}

	start = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	metadata := make([]byte, *meta)
	for s := 0; s*perSession < *locks; s++ {
		n := min(perSession, *locks-s*perSession)
		st := streams[s]
		g.Go(func() error { return lockMany(gctx, st, s, n, metadata) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	took := time.Since(start)
	withLocks, err := measure(ctx, srv)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dlm server, idle:                  %s\n", idle)
	fmt.Fprintf(out, "with %d open session streams:  %s (opened in %s)\n", *sessions, withSessions, opened.Round(time.Millisecond))
	fmt.Fprintf(out, "with %d locks too:            %s (taken in %s)\n", *locks, withLocks, took.Round(time.Millisecond))
	fmt.Fprintf(out, "per 1,000 session streams:         %s\n", withSessions.sub(idle).scale(1000/float64(*sessions)))
	if *locks > 0 {
		fmt.Fprintf(out, "per 100,000 locks (metadata %d B):  %s\n", *meta, withLocks.sub(withSessions).scale(100_000/float64(*locks)))
	}
	return nil
}

// usage is the server's memory at one moment, in bytes: its resident set,
// and from /metrics its Go heap and goroutine stacks in use.
type usage struct{ rss, heap, stack float64 }

func (u usage) sub(v usage) usage     { return usage{u.rss - v.rss, u.heap - v.heap, u.stack - v.stack} }
func (u usage) scale(f float64) usage { return usage{u.rss * f, u.heap * f, u.stack * f} }
func (u usage) String() string {
	return fmt.Sprintf("RSS %6.1f MiB, Go heap in use %6.1f MiB, stacks %5.1f MiB", u.rss/(1<<20), u.heap/(1<<20), u.stack/(1<<20))
}

// measure reads the server's usage.
func measure(ctx context.Context, srv *testenv.DLM) (usage, error) {
	kb, err := rss(srv.PID())
	if err != nil {
		return usage{}, err
	}
	m, err := metrics(ctx, srv.HTTPAddr(), "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes")
	return usage{rss: float64(kb) * 1024, heap: m[0], stack: m[1]}, err
}

// metrics reads the values of the named metrics from the server's /metrics.
func metrics(ctx context.Context, addr string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := make([]float64, len(names))
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for i, name := range names {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				if out[i], err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				found++
			}
		}
	}
	if found != len(names) {
		return nil, fmt.Errorf("/metrics lacks one of %q", names)
	}
	return out, sc.Err()
}

// stream is a session stream, over gRPC or the session transport.
type stream interface {
	Send(*dlmpb.SessionRequest) error
	Recv() (*dlmpb.SessionResponse, error)
}

// lockMany takes n EX locks on distinct resources over one stream, with
// requests pipelined, and waits until every one is granted.
func lockMany(ctx context.Context, st stream, s, n int, metadata []byte) error {
	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if ctx.Err() != nil {
				return
			}
			if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
				Id: &dlmpb.RequestID{Seq: uint64(i + 1)}, Resource: fmt.Sprintf("memprobe/%d/%d", s, i),
				Mode: dlmpb.Mode_MODE_EX, Metadata: metadata,
			}}}); err != nil {
				sendErr = err
				return
			}
		}
	}()
	defer wg.Wait()
	for granted := 0; granted < n; {
		m, err := st.Recv()
		if err != nil {
			return fmt.Errorf("session %d after %d grants: %w", s, granted, err)
		}
		switch {
		case m.GetGranted() != nil:
			granted++
		case m.GetRefused() != nil:
			return fmt.Errorf("session %d: refused: %s", s, m.GetRefused().GetMessage())
		}
	}
	wg.Wait()
	return sendErr
}

// rss returns the resident set of process pid, in KiB.
func rss(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

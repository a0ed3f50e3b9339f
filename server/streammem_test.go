package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// TestMeasureStreamMemory measures the server's memory and goroutines per
// open session stream. It runs only with DLM_MEASURE_STREAMS=N (the number
// of streams); the clients run in a child process (this test binary again)
// so that only the server's memory is counted:
//
//	DLM_MEASURE_STREAMS=5000 go test -run TestMeasureStreamMemory -v ./server/
func TestMeasureStreamMemory(t *testing.T) {
	if addr := os.Getenv("DLM_MEASURE_CLIENT_ADDR"); addr != "" {
		measureClient(t, addr)
		return
	}
	n, _ := strconv.Atoi(os.Getenv("DLM_MEASURE_STREAMS"))
	if n <= 0 {
		t.Skip("set DLM_MEASURE_STREAMS=N to measure the memory of N open streams")
	}
	s := startServer(t, Config{})
	before := measureHeap()

	cmd := exec.Command(os.Args[0], "-test.run=^TestMeasureStreamMemory$")
	cmd.Env = append(os.Environ(), "DLM_MEASURE_CLIENT_ADDR="+s.Addr())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	after := measureHeap()
	t.Logf("%d streams: heap in use %+.0f KB (%.2f KB/stream), sys %+.0f KB (%.2f KB/stream), goroutines %+d (%.2f/stream)",
		n, float64(after.heap-before.heap)/1024, float64(after.heap-before.heap)/1024/float64(n),
		float64(after.sys-before.sys)/1024, float64(after.sys-before.sys)/1024/float64(n),
		after.goroutines-before.goroutines, float64(after.goroutines-before.goroutines)/float64(n))
}

type heapFigures struct {
	heap, sys  int64
	goroutines int
}

func measureHeap() heapFigures {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heapFigures{heap: int64(m.HeapInuse), sys: int64(m.Sys - m.HeapReleased), goroutines: runtime.NumGoroutine()}
}

// measureClient opens DLM_MEASURE_STREAMS streams on addr (100 per
// connection), says "ready" and holds them until its input closes.
func measureClient(t *testing.T, addr string) {
	n, _ := strconv.Atoi(os.Getenv("DLM_MEASURE_STREAMS"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conn *grpc.ClientConn
	for i := range n {
		if i%100 == 0 {
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conn = c
		}
		st, err := dlmpb.NewDLMClient(conn).Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Hour)}}}); err != nil {
			t.Fatal(err)
		}
		for range 2 { // SessionOpened, SessionSync
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

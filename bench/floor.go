package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// floor is the machine's physical floor, measured at the start of a run:
// what one durable write and one loopback round trip cost, which no lock
// service on this machine can go below.
type floor struct {
	Fdatasync time.Duration `json:"fdatasync_p50"` // a 4 KiB append and its fdatasync
	Loopback  time.Duration `json:"loopback_rtt_p50"`
	// Between two processes: plain TCP, and a gRPC stream message.
	ProcessTCP  time.Duration `json:"process_tcp_rtt_p50"`
	ProcessGRPC time.Duration `json:"process_grpc_rtt_p50"`
}

// measureFloor measures the floor, in dir for the sync.
func measureFloor(dir string) (floor, error) {
	var f floor
	var err error
	if f.Fdatasync, err = syncP50(dir, 300); err != nil {
		return f, err
	}
	if f.Loopback, err = loopbackP50(2000); err != nil {
		return f, err
	}
	if f.ProcessTCP, err = processTCPP50(2000); err != nil {
		return f, err
	}
	f.ProcessGRPC, err = processGRPCP50(2000)
	return f, err
}

// syncP50 appends 4 KiB n times to a file in dir, each followed by an
// fdatasync (fsync where there is none), and returns the median.
func syncP50(dir string, n int) (time.Duration, error) {
	file, err := os.CreateTemp(dir, "floor-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(file.Name())
	defer file.Close()
	buf := make([]byte, 4096)
	return medianOf(n, func() error {
		if _, err := file.Write(buf); err != nil {
			return err
		}
		return fdatasync(file)
	})
}

// loopbackP50 returns the median round trip of a 32-byte message over a TCP
// connection to 127.0.0.1, echoed by a goroutine.
func loopbackP50(n int) (time.Duration, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	go echoTCP(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return echoRoundTrips(n, c)
}

// echoRoundTrips returns the median round trip of a 32-byte message to
// the echo at the other end of c.
func echoRoundTrips(n int, c net.Conn) (time.Duration, error) {
	buf := make([]byte, 32)
	return medianOf(n, func() error {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	})
}

// medianOf runs fn n times and returns the median time it took.
func medianOf(n int, fn func() error) (time.Duration, error) {
	took := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}

func (f floor) String() string {
	s := fmt.Sprintf("fdatasync of a 4 KiB append %s, loopback TCP round trip %s", dur(f.Fdatasync), dur(f.Loopback))
	if f.ProcessTCP > 0 {
		s += fmt.Sprintf(" within a process, %s between two Go processes, %s for a message on a gRPC stream between two Go processes", dur(f.ProcessTCP), dur(f.ProcessGRPC))
	}
	return s + " (medians, measured at the start of the run)"
}

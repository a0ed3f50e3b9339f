package main

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the bench command when a
// test starts it again as an echo server.
func TestMain(m *testing.M) {
	if kind := os.Getenv(echoEnv); kind != "" {
		if err := serveEcho(kind); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestProcessRoundTrips measures a few round trips to an echo server in
// another process, over TCP and over a gRPC stream, and refuses an unknown
// kind of echo server.
func TestProcessRoundTrips(t *testing.T) {
	for name, measure := range map[string]func(int) (time.Duration, error){"tcp": processTCPP50, "grpc": processGRPCP50} {
		d, err := measure(20)
		if err != nil || d <= 0 {
			t.Errorf("%s: %v, %v", name, d, err)
		}
	}
	if err := serveEcho("udp"); err == nil {
		t.Error("an echo server of an unknown kind started")
	}
}

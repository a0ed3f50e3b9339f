package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestUsageErrors(t *testing.T) {
	cases := map[string][]string{
		"no command":      nil,
		"unknown command": {"bogus"},
		"unknown flag":    {"server", "-nope"},
		"bad log level":   {"server", "-log-level", "loud"},
		"extra argument":  {"server", "extra"},
		"bad advertise":   {"server", "-advertise", "nohostport"},
		"bad peers":       {"server", "-peers", "node-1"},
		"peers and join":  {"server", "-peers", "node-1=127.0.0.1:1", "-join", "127.0.0.1:2"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(t.Context(), args, &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			if errb.Len() == 0 {
				t.Fatal("no message on stderr")
			}
		})
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"version"}, &out, &out); code != 0 || !strings.HasPrefix(out.String(), "dlm ") {
		t.Fatalf("version: exit %d, %q", code, out.String())
	}
}

// The server starts from flags and environment, serves, and stops cleanly
// when its context ends (as on SIGTERM).
func TestServerRunsAndStopsGracefully(t *testing.T) {
	t.Setenv("DLM_IN_MEMORY", "true")
	t.Setenv("DLM_NODE_ID", "env-node")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"server", "-addr", "127.0.0.1:0", "-http", "127.0.0.1:0",
			"-raft-addr", "127.0.0.1:0", "-raft-timeout", "50ms", "-data", t.TempDir()}, &errb, &errb)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), "serving as leader") {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 20s:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if log := errb.String(); !strings.Contains(log, "id=env-node") || !strings.Contains(log, "in_memory=true") {
		t.Fatalf("environment not applied:\n%s", log)
	}
	if log := errb.String(); !strings.Contains(log, "build.version=") || !strings.Contains(log, "build.go=go") {
		t.Fatalf("no build in the start-up log:\n%s", log)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after shutdown:\n%s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no shutdown within 10s")
	}
	if !strings.Contains(errb.String(), "dlm server: stopped") {
		t.Fatalf("no clean stop:\n%s", errb.String())
	}
}

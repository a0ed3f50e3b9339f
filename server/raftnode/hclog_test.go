package raftnode

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dlmhq/dlm/server/internal/servertest"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
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

// TestRaftLogsThroughSlog: Raft's hclog output reaches the node's slog
// logger, with Raft's logger name as an attribute.
func TestRaftLogsThroughSlog(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := openNode(t, Config{InMemory: true, Logger: logger})
	n.Close()
	out := buf.String()
	for _, want := range []string{"logger=raft", "entering leader state", "dlm server: raft started"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

package raftnode

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/server/internal/servertest"
)

// TestRaftLogsThroughSlog: Raft's hclog output reaches the node's slog
// logger, with Raft's logger name as an attribute.
func TestRaftLogsThroughSlog(t *testing.T) {
	defer servertest.CheckNoLeaks(t)
	var buf servertest.LogBuffer
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

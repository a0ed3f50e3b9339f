package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestFirstThenOncePerIntervalWithCount(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l := New(10 * time.Second)
	l.now = clk.now
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := context.Background()
	for range 1000 {
		l.Log(ctx, log, slog.LevelWarn, "k", "failing")
	}
	clk.t = clk.t.Add(10 * time.Second)
	l.Log(ctx, log, slog.LevelWarn, "k", "failing")
	l.Log(ctx, log, slog.LevelWarn, "other", "another")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if strings.Contains(lines[0], "suppressed") || !strings.Contains(lines[1], "suppressed=999") {
		t.Fatalf("lines:\n%s", buf.String())
	}
	if n := l.Reset("k"); n != 0 {
		t.Fatalf("Reset = %d, want 0", n)
	}
	if ok, _ := l.Allow("k"); !ok {
		t.Fatal("a key reset is not allowed at once")
	}
}

func TestKeysAreBounded(t *testing.T) {
	l := New(time.Hour)
	for i := range 3 * maxKeys {
		l.Allow(strings.Repeat("x", i%50) + string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if n := len(l.keys); n > maxKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxKeys)
	}
}

package demo

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// The default database is the demo's own in-memory table: no setup, and
// nothing to compile beyond dlm (SQLite took 42 s of a clean build).
func TestDemoMemory(t *testing.T) {
	before := runtime.NumGoroutine()
	var out bytes.Buffer
	cfg := Config{Instances: 6, Stock: 4}
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Logf("report:\n%s", out.String())
	if rep.Database != "memory" {
		t.Errorf("database %q, want memory", rep.Database)
	}
	checkReport(t, rep, cfg, out.String())
	waitGoroutines(t, before)
}

func TestDemoPostgres(t *testing.T) {
	pg := testenv.StartPostgres(t)
	var out bytes.Buffer
	cfg := Config{Instances: 6, Stock: 4, DatabaseURL: pg.DSN()}
	rep, err := Run(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Logf("report:\n%s", out.String())
	if rep.Database != "PostgreSQL" {
		t.Errorf("database %q, want PostgreSQL", rep.Database)
	}
	checkReport(t, rep, cfg, out.String())

	// The run's tables are gone.
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'dlm_demo_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d demo tables left behind", n)
	}
}

// checkReport asserts the story: act 1 oversells, act 2 sells exactly the
// stock with growing tokens, act 3 rejects the stale write.
func checkReport(t *testing.T, rep Report, cfg Config, text string) {
	t.Helper()
	if p := rep.Problems(); len(p) > 0 {
		t.Errorf("problems: %q", p)
	}
	u := rep.Unlocked
	if u.Instances != cfg.Instances || u.Stock != cfg.Stock {
		t.Errorf("act 1: %d instances, stock %d; want %d, %d", u.Instances, u.Stock, cfg.Instances, cfg.Stock)
	}
	// The race window (20 ms between read and write, every instance
	// starting at once) is wide enough to oversell every time.
	if u.Oversold == 0 || u.Orders != u.Stock+u.Oversold {
		t.Errorf("act 1: %d orders for %d items, oversold %d: want an oversell", u.Orders, u.Stock, u.Oversold)
	}
	l := rep.Locked
	if l.Oversold != 0 || l.Orders != cfg.Stock || l.StockLeft != 0 {
		t.Errorf("act 2: %d orders for %d items, %d left, oversold %d", l.Orders, cfg.Stock, l.StockLeft, l.Oversold)
	}
	if len(l.Tokens) != cfg.Stock {
		t.Errorf("act 2: tokens %v, want one per order", l.Tokens)
	}
	for i := 1; i < len(l.Tokens); i++ {
		if l.Tokens[i] <= l.Tokens[i-1] {
			t.Errorf("act 2: tokens %v do not grow with the orders", l.Tokens)
		}
	}
	f := rep.Fencing
	if f.StaleToken == 0 || f.FreshToken <= f.StaleToken {
		t.Errorf("act 3: stale token %d, fresh token %d: want 0 < stale < fresh", f.StaleToken, f.FreshToken)
	}
	if len(l.Tokens) > 0 && f.StaleToken <= l.Tokens[len(l.Tokens)-1] {
		t.Errorf("act 3: token %d not above act 2's last %d", f.StaleToken, l.Tokens[len(l.Tokens)-1])
	}
	if !f.FreshAccepted || f.StaleAccepted {
		t.Errorf("act 3: fresh write accepted %v, stale write accepted %v", f.FreshAccepted, f.StaleAccepted)
	}
	if !f.StaleLost || f.StaleLoss == "" {
		t.Errorf("act 3: the paused holder's lease was not lost (%q)", f.StaleLoss)
	}
	if f.Fence != f.FreshToken || f.Orders != 1 || f.StockLeft != 0 {
		t.Errorf("act 3: fence %d (want %d), %d orders, %d left", f.Fence, f.FreshToken, f.Orders, f.StockLeft)
	}
	if f.TakeOver < f.TTL {
		t.Errorf("act 3: taken over after %s, before the TTL %s", f.TakeOver, f.TTL)
	}
	for _, want := range []string{"Act 1", "Act 2", "Act 3", "oversold     0\n", "REJECTED", "the stale write was rejected"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// waitGoroutines waits until the goroutines Run started have stopped.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // generous: a loaded machine is slow to unwind
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before Run, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDemoConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, c := range map[string]Config{
		"one instance":   {Instances: 1},
		"many instances": {Instances: MaxInstances + 1},
		"no stock":       {Stock: -1},
		"much stock":     {Stock: MaxStock + 1},
		"short ttl":      {TTL: time.Millisecond},
		"negative work":  {Work: -time.Second},
		"mysql":          {DatabaseURL: "mysql://root:secret@localhost/db"},
	} {
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
		if _, err := Run(t.Context(), c, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Run: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A run whose context ends stops promptly, with everything closed.
func TestDemoContextEnds(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Config{Work: 200 * time.Millisecond}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run returned %s after its context ended", d)
	}
	waitGoroutines(t, before)
}

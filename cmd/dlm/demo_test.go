package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/cmd/dlm/internal/demo"
	"github.com/dlmhq/dlm/internal/testenv"
)

// `dlm demo`, the real binary, with no setup: exit 0, and the report says
// that nothing was oversold with the lock and the stale write was rejected.
func TestDemoCommand(t *testing.T) {
	bin := dlmBin(t)
	text := runDemoBinary(t, bin, "demo", "-instances", "5", "-stock", "3")
	t.Logf("dlm demo:\n%s", text)
	act2, _, ok := strings.Cut(text[strings.Index(text, "Act 2"):], "Act 3")
	if !ok || !strings.Contains(act2, "orders       3 for 3 items") || !strings.Contains(act2, "oversold     0\n") {
		t.Errorf("act 2 does not report 3 orders and zero oversold:\n%s", act2)
	}
	if !strings.Contains(text, "REJECTED") || !strings.Contains(text, "with dlm, none; the stale write was rejected") {
		t.Error("the report does not show the stale write rejected")
	}

	var rep demo.Report
	if err := json.Unmarshal([]byte(runDemoBinary(t, bin, "demo", "-json")), &rep); err != nil {
		t.Fatalf("-json: %v", err)
	}
	if rep.Locked.Oversold != 0 || rep.Locked.Orders != demo.DefaultStock || rep.Fencing.StaleAccepted ||
		rep.Fencing.FreshToken <= rep.Fencing.StaleToken {
		t.Errorf("-json: %+v", rep)
	}
}

// runDemoBinary runs the binary, wants exit 0, and returns its stdout.
func runDemoBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dlm %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("dlm %s wrote to stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String()
}

func TestDemoUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown flag":   {"-nope"},
		"no instances":   {"-instances", "0"},
		"one instance":   {"-instances", "1"},
		"no stock":       {"-stock", "0"},
		"bad database":   {"-db", "mysql://localhost/db"},
		"bad timeout":    {"-timeout", "0s"},
		"extra argument": {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(t.Context(), append([]string{"demo"}, args...), &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			if errb.Len() == 0 {
				t.Fatal("no message on stderr")
			}
		})
	}
	var out bytes.Buffer
	if code := run(t.Context(), []string{"demo", "-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "-instances") {
		t.Fatalf("-h: exit %d:\n%s", code, out.String())
	}
}

// A database that cannot be reached is exit 1, not a usage error.
func TestDemoUnreachableDatabase(t *testing.T) {
	var out, errb bytes.Buffer
	url := "postgres://postgres@127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) + "/postgres?sslmode=disable&connect_timeout=2"
	if code := run(t.Context(), []string{"demo", "-db", url, "-timeout", "20s"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "PostgreSQL") {
		t.Errorf("stderr does not name the database:\n%s", errb.String())
	}
}

// dlm links no embedded SQL database: the demo's default database is its
// own in-memory table, so a clean build of dlm does not compile one.
// modernc.org/sqlite and its C library translated to Go took 42 s of the
// 122 s a clean build took on a quiet 2-core machine.
func TestDLMLinksNoSQLite(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "modernc.org/") {
			t.Errorf("dlm links %s", p)
		}
	}
}

//go:build unix

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// Against a store that is down, dlm run without --wait retries for
// --unavailable-timeout, says so once, and exits 69 with one line that
// names the store and the timeout; the command never runs.
func TestRunGivesUpOnAnUnreachableStore(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dlm"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			// A port that was free a moment ago: nothing listens there.
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			warns, errs := runUnreachable(t, kind, addr)
			if len(warns) != 1 || !strings.Contains(warns[0], "unreachable; retrying for up to 2s") || !strings.Contains(warns[0], "store="+kind) {
				t.Errorf("warnings %q, want one that says the %s store is unreachable and that dlm retries", warns, kind)
			}
			if !strings.Contains(errs, "connection refused") && !strings.Contains(errs, "refused the connection") {
				t.Errorf("error %q does not give the cause", errs)
			}
		})
	}
}

// A store that accepts connections and never answers is given up on the
// same way, within the timeout (plus the withdrawal of the request whose
// answer never came, at most 5 s).
func TestRunGivesUpOnASilentStore(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "dlm"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			warns, _ := runUnreachable(t, kind, silentAddr(t))
			if len(warns) > 1 {
				t.Errorf("warnings %q, want at most one", warns)
			}
		})
	}
}

// runUnreachable runs dlm run --unavailable-timeout 2s against the kind
// of store at addr, checks that it exits 69 with one error line that names
// the store and the timeout and never runs the command, and returns its
// warnings and its error line.
func runUnreachable(t *testing.T, kind, addr string) (warns []string, errLine string) {
	t.Helper()
	url := map[string]string{
		"redis":    "redis://" + addr,
		"postgres": "postgres://dlm@" + addr + "/dlm?sslmode=disable",
		"dlm":      "dlm://" + addr,
	}[kind]
	p := startDLM(t, nil, "run", "--store", url, "--lock", "x", "--unavailable-timeout", "2s", "--", "echo", "ran")
	if code := p.wait(t, 20*time.Second); code != exitUnavailable {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUnavailable, p.stderr)
	}
	if out := p.stdout.String(); out != "" {
		t.Fatalf("the command ran: %q", out)
	}
	var errs []string
	for line := range strings.Lines(p.stderr.String()) {
		switch {
		case strings.Contains(line, "level=WARN"):
			warns = append(warns, line)
		case strings.HasPrefix(line, "dlm run: "):
			errs = append(errs, line)
		default:
			t.Errorf("unexpected line: %q", line)
		}
	}
	want := "the " + kind + " store was unreachable for 2s: "
	if len(errs) != 1 || !strings.Contains(errs[0], want) {
		t.Fatalf("errors %q, want one line with %q", errs, want)
	}
	return warns, errs[0]
}

// A lock someone holds is waited for past --unavailable-timeout: only
// --wait ends that wait (exit 75, busy).
func TestRunContentionIsNotUnavailability(t *testing.T) {
	for name, store := range dlmAndRedis {
		t.Run(name, func(t *testing.T) {
			flag := store(t)
			holder := startDLM(t, nil, "run", flag, "--lock", "held-"+name, "--", "sh", "-c", holdScript)
			holder.stdout.expect(t, "held", 30*time.Second)
			code, out, stderr := runDLM(t, nil, "run", flag, "--lock", "held-"+name,
				"--unavailable-timeout", "100ms", "--wait", "1s", "--", "echo", "ran")
			if code != exitBusy || out != "" {
				t.Fatalf("exit %d (want %d, busy), stdout %q; stderr:\n%s", code, exitBusy, out, stderr)
			}
			if strings.Contains(stderr, "unreachable") {
				t.Fatalf("contention reported as unavailability:\n%s", stderr)
			}
		})
	}
}

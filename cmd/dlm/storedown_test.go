package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/internal/testenv"
)

// closedAddr returns a loopback address where nothing listens: a store
// that is down.
func closedAddr(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
}

// silentAddr returns the address of a server that is up but never answers.
func silentAddr(t *testing.T) string { return testenv.SilentAddr(t) }

// storeURL is a URL of kind for addr (two nodes for redlock).
func storeURL(kind, addr, addr2 string) string {
	switch kind {
	case "postgres":
		return "postgres://dlm:secret@" + addr + "/dlm"
	case "redlock":
		return "redlock://" + addr + "," + addr2
	}
	return kind + "://" + addr
}

// TestStoreDownOneError checks that dlm status, dlm ls and dlm run against
// a store that is down (a closed port) or does not answer (a listener that
// never reads) say so in exactly one line that names the server, and exit
// 69, for every kind of store.
func TestStoreDownOneError(t *testing.T) {
	dlmBin(t)
	for _, down := range []string{"closed", "silent"} {
		for _, kind := range []string{"dlm", "redis", "redlock", "postgres", "etcd"} {
			for _, cmd := range []string{"status", "ls", "run"} {
				if cmd == "run" && kind != "dlm" {
					continue // the other stores connect at the first lock request
				}
				t.Run(down+"/"+kind+"/"+cmd, func(t *testing.T) {
					t.Parallel()
					addr, addr2 := closedAddr(t), closedAddr(t)
					want := "refused the connection"
					if down == "silent" {
						addr, addr2, want = silentAddr(t), silentAddr(t), "did not answer within"
					}
					if kind == "etcd" || kind == "redlock" {
						// Their clients retry a refused dial until their
						// timeout, and do not say that it was refused.
						want = "did not answer within"
					}
					args := []string{cmd, "--store=" + storeURL(kind, addr, addr2)}
					if cmd == "run" {
						// dlm run retries a store that is down for
						// --unavailable-timeout, warning once in its log.
						args = append(args, "--lock", "down", "--unavailable-timeout", "1s", "--", "true")
					}
					code, stdout, stderr := runDLM(t, nil, args...)
					if code != exitUnavailable {
						t.Errorf("exit %d, want %d", code, exitUnavailable)
					}
					// dlm status reports on stdout; the others say it on stderr.
					prefix, report := "dlm "+cmd+": ", stderr
					if cmd == "status" {
						prefix, report = "reachable: ", stdout
						if stderr != "" {
							t.Errorf("stderr: %q, want nothing", stderr)
						}
					} else if stdout != "" {
						t.Errorf("stdout: %q, want nothing", stdout)
					}
					var lines []string
					others := 0
					for _, l := range strings.Split(strings.TrimSuffix(report, "\n"), "\n") {
						switch {
						case strings.HasPrefix(l, prefix):
							lines = append(lines, l)
						case cmd == "run" && strings.Contains(l, "level=WARN") && strings.Contains(l, "unreachable; retrying"):
							// dlm run's one warning that it retries
						default:
							others++
						}
					}
					if cmd != "status" && others != 0 {
						lines = nil
					}
					if len(lines) != 1 || !strings.Contains(lines[0], addr) || !strings.Contains(lines[0], want) ||
						kind == "redlock" && !strings.Contains(lines[0], addr2) {
						t.Fatalf("want one line %q... naming %s and saying %q; got:\n%s", prefix, addr, want, report)
					}
					if cmd == "status" && strings.Count(stdout, "\n") != 2 {
						t.Errorf("status: want 2 lines (store, reachable); got:\n%s", stdout)
					}
				})
			}
		}
	}
}

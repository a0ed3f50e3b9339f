package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// packagePrefix matches an error that names one of dlm's Go packages, which
// a user of the command does not know.
var packagePrefix = regexp.MustCompile(`\b(locktable|driver|storeurl|remote|dlmpb|server):`)

// oneErrorLine checks that stderr is exactly one line, starting with
// prefix, containing each of want and naming none of dlm's packages.
func oneErrorLine(t *testing.T, stderr, prefix string, want ...string) {
	t.Helper()
	rest, ok := strings.CutPrefix(stderr, prefix) // "dlm server: " names the command
	if strings.Count(stderr, "\n") != 1 || !ok || packagePrefix.MatchString(rest) {
		t.Errorf("want one line starting %q without package names; got:\n%s", prefix, stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("want %q in %q", w, stderr)
		}
	}
}

// TestUsageErrorsOneLineExit2 checks that bad flags and requests a store
// does not support are usage errors: exit 2 and one line, with a hint for
// a bad flag instead of the whole usage text.
func TestUsageErrorsOneLineExit2(t *testing.T) {
	redis := "--store=redis://" + testenv.StartRedis(t).Addr()
	dead := "--store=dlm://" + closedAddr(t)
	cases := []struct {
		name   string
		args   []string
		prefix string
		want   []string
	}{
		{"bad wait", []string{"run", dead, "--lock", "a", "--wait", "-1s", "--", "true"}, "dlm run: ", []string{"-wait", "see dlm run -h"}},
		{"unknown run flag", []string{"run", "--nope", "--lock", "a", "--", "true"}, "dlm run: ", []string{"-nope", "see dlm run -h"}},
		{"bad ls limit", []string{"ls", dead, "--limit", "many"}, "dlm ls: ", []string{"-limit", "see dlm ls -h"}},
		{"unknown status flag", []string{"status", "--nope"}, "dlm status: ", []string{"-nope", "see dlm status -h"}},
		{"bad mode", []string{"run", dead, "--lock", "a", "--mode", "XX", "--", "true"}, "dlm run: ", []string{`--mode "XX"`, "nl, cr, cw, pr, pw or ex"}},
		{"mode redis lacks", []string{"run", redis, "--lock", "a", "--mode", "pr", "--", "true"}, "dlm run: ", []string{"not supported"}},
		{"missing CA file", []string{"ls", "--store=dlms://" + closedAddr(t) + "?ca=/nonexistent/ca.pem"}, "dlm ls: ", []string{"ca: ", "/nonexistent/ca.pem"}},
		{"unknown server flag", []string{"server", "--nope"}, "dlm server: ", []string{"-nope", "see dlm server -h"}},
		{"bad server duration", []string{"server", "--raft-timeout", "soon"}, "dlm server: ", []string{"-raft-timeout", "see dlm server -h"}},
		{"unknown demo flag", []string{"demo", "--nope"}, "dlm demo: ", []string{"-nope", "see dlm demo -h"}},
		{"unknown certs flag", []string{"certs", "--nope"}, "dlm certs: ", []string{"-nope", "see dlm certs -h"}},
		{"unknown cluster flag", []string{"cluster", "members", "--nope"}, "dlm cluster members: ", []string{"-nope", "see dlm cluster members -h"}},
		{"semaphore on redis", []string{"run", redis, "--lock", "a", "-n", "2", "--", "true"}, "dlm run: ", []string{"not supported"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runDLM(t, nil, c.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			oneErrorLine(t, stderr, c.prefix, c.want...)
		})
	}
}

// TestServerRefusalNamesNoPackage checks that a request the dlm server
// refuses (a semaphore of another capacity than the one held) is a usage
// error in one line that names none of dlm's packages.
func TestServerRefusalNamesNoPackage(t *testing.T) {
	store := storeFlag(sharedServer(t))
	name := "refusal/" + t.Name()
	holder := startDLM(t, nil, "run", store, "--lock", name, "-n", "2", "--", "sh", "-c", holdScript)
	holder.stdout.expect(t, "held", 30*time.Second)
	code, _, stderr := runDLM(t, nil, "run", store, "--lock", name, "-n", "3", "--", "true")
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	oneErrorLine(t, stderr, "dlm run: ", "capacity", "2 permits")
}

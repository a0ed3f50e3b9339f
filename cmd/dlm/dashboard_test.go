package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/testenv"
)

// browserDir is test/browser, from this package's directory.
const browserDir = "../../test/browser"

// needBrowser skips the test when node, Debian's chromium or the browser
// test's node modules are missing, or fails it if DLM_BROWSER_TEST=1 (so
// that a run meant to include it cannot pass without it). It returns the
// script's absolute path.
func needBrowser(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(browserDir)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		missing = append(missing, "/usr/bin/chromium")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "test/browser/node_modules")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("browser test: missing %s; install with scripts/browser-setup.sh (as root)", strings.Join(missing, ", "))
		if os.Getenv("DLM_BROWSER_TEST") == "1" {
			t.Fatal(msg + " (DLM_BROWSER_TEST=1 requires it)")
		}
		t.Skip(msg)
	}
	return filepath.Join(dir, "dashboard.mjs")
}

// acquired is the outcome of a queued acquisition.
type acquired struct {
	lease *dlm.Lease
	err   error
}

// The dashboard of a real server, in a real browser: it shows a holder and
// its queue, follows the hand-over to the first waiter, and filters by
// prefix (test/browser/dashboard.mjs checks the page).
func TestDashboardInBrowser(t *testing.T) {
	script := needBrowser(t)
	srv := testenv.StartDLM(t, dlmBin(t))
	dashboardScenario(t, script, srv, nil, nil, nil)
}

// The dashboard of a server that wants credentials: the page asks for a
// token, trades it for a login cookie, and then shows the same as an open
// server's.
func TestDashboardLoginInBrowser(t *testing.T) {
	script := needBrowser(t)
	dir := t.TempDir()
	tokens := map[string]string{}
	var lines []string
	for _, id := range []string{"ops", "alice", "bob", "carol"} {
		tokens[id] = id + "-browser-token-0123456789"
		lines = append(lines, id+" "+tokens[id])
	}
	tokFile := filepath.Join(dir, "tokens")
	rules := filepath.Join(dir, "rules")
	if err := os.WriteFile(tokFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rules, []byte("ops admin *\nops list *\n* lock *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Loopback only: the tokens go in plaintext, by explicit choice.
	srv := testenv.StartDLM(t, dlmBin(t), "-auth-tokens", tokFile, "-auth-rules", rules)
	dashboardScenario(t, script, srv, tokens, func(label string) []dlmserver.Option {
		return []dlmserver.Option{dlmserver.WithToken(tokens[label]), dlmserver.AllowTokenOverPlaintext()}
	}, []string{"--token", tokens["ops"]})
}

// dashboardScenario runs the browser script against srv: alice holds a
// resource that bob and carol queue for, then lets go. tokens (nil without
// authentication) are the clients' and the page's: the listing the test
// polls uses ops's. storeOpts adds each client's options; args go to the
// script.
func dashboardScenario(t *testing.T, script string, srv *testenv.DLM, tokens map[string]string,
	storeOpts func(label string) []dlmserver.Option, args []string) {
	t.Helper()
	// Bounds for a hung browser or server, with room for a loaded machine,
	// where a headless chromium takes seconds to start and render: each
	// step of the script may take a minute (--timeout), the whole run
	// five.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	client := func(label string) *dlm.Client {
		opts := []dlmserver.Option{dlmserver.WithLabel(label)}
		if storeOpts != nil {
			opts = append(opts, storeOpts(label)...)
		}
		store, err := dlmserver.Dial(ctx, srv.Addr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			store.Close(ctx)
		})
		return dlm.New(store)
	}
	alice, bob, carol := client("alice"), client("bob"), client("carol")
	const resource, other, prefix = "jobs/nightly-report", "cache/warm-up", "jobs/"
	const metadata = `alice's <b>nightly</b> <img src=x onerror="alert(1)"> run` // shown as text, never as markup
	opts := []dlm.Option{dlm.WithTTL(10 * time.Minute)}

	held, err := alice.Acquire(ctx, resource, append(opts, dlm.WithMetadata(metadata))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Acquire(ctx, other, opts...); err != nil {
		t.Fatal(err)
	}
	queue := func(c *dlm.Client) <-chan acquired {
		ch := make(chan acquired, 1)
		go func() {
			l, err := c.Acquire(ctx, resource, opts...) // until ctx ends
			ch <- acquired{l, err}
		}()
		return ch
	}
	bobGot := queue(bob)
	waitQueue(t, ctx, srv.HTTPAddr(), tokens["ops"], resource, 1)
	carolGot := queue(carol)
	waitQueue(t, ctx, srv.HTTPAddr(), tokens["ops"], resource, 2)

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	cmd := exec.CommandContext(ctx, "node", append([]string{script, "http://" + srv.HTTPAddr() + "/", shot,
		"--resource", resource, "--holder", "alice", "--waiters", "bob,carol", "--other", other, "--prefix", prefix,
		"--metadata", metadata, "--timeout", "60000"}, args...)...)
	cmd.Dir = filepath.Dir(script)
	cmd.WaitDelay = 5 * time.Second
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// The script says when it has seen the first state; then alice lets go,
	// and the script watches the page for bob's grant.
	var bobLease *dlm.Lease
	released := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if line != "waiting-for-release" || released {
			continue
		}
		released = true
		if err := held.Release(ctx); err != nil {
			t.Errorf("alice's release: %v", err)
			continue // the script fails when it does not see the change
		}
		select {
		case got := <-bobGot:
			if got.err != nil {
				t.Errorf("bob, first in the queue, was not granted the lock: %v", got.err)
			}
			bobLease = got.lease
		case <-ctx.Done():
			t.Error("bob was not granted the lock")
		}
	}
	err = cmd.Wait()
	if s := stderr.String(); s != "" {
		t.Logf("stderr:\n%s", s)
	}
	if err != nil {
		t.Fatalf("node %s: %v", filepath.Base(script), err)
	}
	if !released {
		t.Fatal("the script succeeded without asking for the release")
	}
	checkPNG(t, shot)
	t.Logf("screenshot: %s", shot)
	if dir := os.Getenv("DLM_SCREENSHOT_DIR"); dir != "" {
		name := "dashboard.png"
		if tokens != nil {
			name = "dashboard-login.png"
		}
		saved := filepath.Join(dir, name)
		if err := copyFile(shot, saved); err != nil {
			t.Errorf("DLM_SCREENSHOT_DIR: %v", err)
		} else {
			t.Logf("screenshot copied to %s", saved)
		}
	}

	// Carol is next.
	if bobLease != nil {
		if err := bobLease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := <-carolGot; got.err != nil {
			t.Fatalf("carol after bob: %v", got.err)
		} else {
			got.lease.Release(ctx)
		}
	}
}

// waitQueue waits until resource has n queued requests, by the server's
// listing (read with token, if not "").
func waitQueue(t *testing.T, ctx context.Context, httpAddr, token, resource string, n int) {
	t.Helper()
	u := "http://" + httpAddr + "/v1/resources?prefix=" + url.QueryEscape(resource)
	for {
		var list struct {
			Resources []struct {
				Name    string            `json:"name"`
				Waiting []json.RawMessage `json:"waiting"`
			} `json:"resources"`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.Resources {
			if r.Name == resource && len(r.Waiting) == n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %d queued requests not seen: %v", resource, n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkPNG fails unless path is a PNG image of some size.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 10_000 {
		t.Fatalf("screenshot %s: %d bytes, not a plausible PNG", path, len(b))
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

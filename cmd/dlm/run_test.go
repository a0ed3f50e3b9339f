package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/internal/testenv"
)

// Several dlm run processes contend on one lock; the commands never
// overlap (mkdir fails for a second one inside) and their tokens grow in
// the order they ran.
func TestRunNeverOverlaps(t *testing.T) {
	for name, store := range dlmAndRedis {
		t.Run(name, func(t *testing.T) {
			flag := store(t)
			dir := t.TempDir()
			script := `mkdir "$D/inside" || exit 99; echo "$DLM_LOCK_TOKEN" >> "$D/tokens"; sleep 0.02; rmdir "$D/inside"`
			const procs, rounds = 4, 4
			var wg sync.WaitGroup
			for range procs {
				wg.Go(func() {
					for range rounds {
						code, _, stderr := runDLM(t, []string{"D=" + dir}, "run", flag, "--lock", "overlap-"+name, "--", "sh", "-c", script)
						if code != 0 {
							t.Errorf("dlm run exit %d; stderr:\n%s", code, stderr)
							return
						}
					}
				})
			}
			wg.Wait()
			data, err := os.ReadFile(filepath.Join(dir, "tokens"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(string(data))
			if len(lines) != procs*rounds {
				t.Fatalf("%d critical sections recorded, want %d", len(lines), procs*rounds)
			}
			var tokens []uint64
			for _, l := range lines {
				n, err := strconv.ParseUint(l, 10, 64)
				if err != nil || n == 0 {
					t.Fatalf("DLM_LOCK_TOKEN %q", l)
				}
				tokens = append(tokens, n)
			}
			if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
				t.Fatalf("tokens in the order the commands ran: %v, want strictly increasing", tokens)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	store := storeFlag(sharedServer(t))
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	dead := fmt.Sprintf("--store=dlm://127.0.0.1:%d", testenv.FreePort(t))
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"the command's code", []string{"run", store, "--lock", "codes", "--", "sh", "-c", "exit 3"}, 3},
		{"success", []string{"run", store, "--lock", "codes", "--", "true"}, 0},
		{"killed by a signal", []string{"run", store, "--lock", "codes", "--", "sh", "-c", "kill -9 $$"}, 128 + 9},
		{"not found", []string{"run", store, "--lock", "codes", "--", "no-such-command-dlm"}, exitNotFound},
		{"not executable", []string{"run", store, "--lock", "codes", "--", notExec}, exitCannotExec},
		{"store unreachable", []string{"run", dead, "--connect-timeout=500ms", "--unavailable-timeout=500ms", "--lock", "codes", "--", "true"}, exitUnavailable},
		{"negative unavailable timeout", []string{"run", store, "--lock", "x", "--unavailable-timeout", "-1s", "--", "true"}, exitUsage},
		{"no lock", []string{"run", store, "--", "true"}, exitUsage},
		{"no command", []string{"run", store, "--lock", "x"}, exitUsage},
		{"one slot", []string{"run", store, "--lock", "x", "-n", "1", "--", "true"}, exitUsage},
		{"slots and mode", []string{"run", store, "--lock", "x", "-n", "2", "--mode", "pr", "--", "true"}, exitUsage},
		{"bad mode", []string{"run", store, "--lock", "x", "--mode", "xx", "--", "true"}, exitUsage},
		{"bad wait", []string{"run", store, "--lock", "x", "--wait", "-1s", "--", "true"}, exitUsage},
		{"bad store", []string{"run", "--store", "mysql://h", "--lock", "x", "--", "true"}, exitUsage},
		{"empty name", []string{"run", store, "--lock", "", "--", "true"}, exitUsage},
		{"name too long", []string{"run", store, "--lock", strings.Repeat("n", 513), "--", "true"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runDLM(t, nil, tc.args...)
			if code != tc.want {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.want, stderr)
			}
			if code != 0 && code != 3 && code < 128 && !strings.Contains(stderr, "dlm run") {
				t.Errorf("no explanation on stderr: %q", stderr)
			}
		})
	}
}

func TestRunGivesTheCommandItsLock(t *testing.T) {
	store := storeFlag(sharedServer(t))
	code, out, stderr := runDLM(t, nil, "run", store, "--lock", "env-check", "--", "sh", "-c", `echo "$DLM_LOCK_NAME $DLM_LOCK_TOKEN"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f := strings.Fields(out)
	if len(f) != 2 || f[0] != "env-check" {
		t.Fatalf("the command saw %q", out)
	}
	if n, err := strconv.ParseUint(f[1], 10, 64); err != nil || n == 0 {
		t.Fatalf("DLM_LOCK_TOKEN=%q", f[1])
	}
}

// holdScript prints "held" and then runs until it is stopped.
const holdScript = `echo held; exec sleep 60`

// --wait 0 skips a lock that is held (the cron use); a longer wait gives up
// when it runs out; a wait that a signal interrupts leaves no waiter behind.
func TestRunBusy(t *testing.T) {
	store := storeFlag(sharedServer(t))
	holder := startDLM(t, nil, "run", store, "--lock", "busy", "--", "sh", "-c", holdScript)
	holder.stdout.expect(t, "held", 30*time.Second)

	code, _, stderr := runDLM(t, nil, "run", store, "--lock", "busy", "--wait", "0", "--", "echo", "ran")
	if code != exitBusy || !strings.Contains(stderr, "busy") {
		t.Fatalf("--wait 0 on a held lock: exit %d, want %d; stderr:\n%s", code, exitBusy, stderr)
	}
	start := time.Now()
	code, _, _ = runDLM(t, nil, "run", store, "--lock", "busy", "--wait", "300ms", "--", "echo", "ran")
	if code != exitBusy {
		t.Fatalf("--wait 300ms on a held lock: exit %d, want %d", code, exitBusy)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("--wait 300ms gave up after %s", el)
	}

	waiter := startDLM(t, nil, "run", store, "--lock", "busy", "--", "echo", "ran")
	awaitList(t, store, "busy", func(r resourceJSON) bool { return len(r.Waiters) == 1 })
	waiter.cmd.Process.Signal(syscall.SIGTERM)
	if code := waiter.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("a waiter stopped by SIGTERM exited %d; stderr:\n%s", code, waiter.stderr)
	}
	if strings.Contains(waiter.stdout.String(), "ran") {
		t.Fatal("the command ran although the lock was never acquired")
	}
	awaitList(t, store, "busy", func(r resourceJSON) bool { return len(r.Waiters) == 0 && len(r.Holders) == 1 })

	// The holder ends on SIGTERM, passed to its command, and frees the lock.
	holder.cmd.Process.Signal(syscall.SIGTERM)
	if code := holder.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("holder exit %d after SIGTERM; stderr:\n%s", code, holder.stderr)
	}
	if code, out, stderr := runDLM(t, nil, "run", store, "--lock", "busy", "--wait", "0", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("after the holder ended: exit %d, %q; stderr:\n%s", code, out, stderr)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	store := storeFlag(sharedServer(t))
	p := startDLM(t, nil, "run", store, "--lock", "signals", "--", "sh", "-c",
		`trap 'echo got-usr1; exit 7' USR1; echo held; while :; do sleep 0.02; done`)
	p.stdout.expect(t, "held", 30*time.Second)
	p.cmd.Process.Signal(syscall.SIGUSR1)
	p.stdout.expect(t, "got-usr1", 10*time.Second)
	if code := p.wait(t, 10*time.Second); code != 7 {
		t.Fatalf("exit %d, want the command's 7; stderr:\n%s", code, p.stderr)
	}
}

// A semaphore of two slots: two commands hold it at once, a third is busy,
// and gets in when one ends.
func TestRunSemaphore(t *testing.T) {
	store := storeFlag(sharedServer(t))
	a := startDLM(t, nil, "run", store, "--lock", "sem", "-n", "2", "--", "sh", "-c", holdScript)
	b := startDLM(t, nil, "run", store, "--lock", "sem", "-n", "2", "--", "sh", "-c", holdScript)
	a.stdout.expect(t, "held", 30*time.Second)
	b.stdout.expect(t, "held", 30*time.Second)
	if code, _, stderr := runDLM(t, nil, "run", store, "--lock", "sem", "-n", "2", "--wait", "0", "--", "true"); code != exitBusy {
		t.Fatalf("a third on two slots: exit %d; stderr:\n%s", code, stderr)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.wait(t, 10*time.Second)
	if code, _, stderr := runDLM(t, nil, "run", store, "--lock", "sem", "-n", "2", "--wait", "10s", "--", "true"); code != 0 {
		t.Fatalf("a slot freed: exit %d; stderr:\n%s", code, stderr)
	}
}

// A lost lock stops the command: SIGTERM at once, SIGKILL after the grace
// period for a command that ignores SIGTERM, and exit 76. The loss is made
// by deleting the lock's key in Redis; the lease notices at its next
// renewal (every TTL/3), long before its deadline. The TTL leaves a loaded
// machine room for late renewals before the key is deleted.
func TestRunLostLockStopsTheCommand(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rdb.Close()
	const ttl, grace = 3 * time.Second, 400 * time.Millisecond
	for _, tc := range []struct {
		name, script string
		killed       bool
	}{
		{"obeys SIGTERM", `trap 'echo got-term; exit 0' TERM; echo held; while :; do sleep 0.02; done`, false},
		{"ignores SIGTERM", `trap '' TERM; echo held; while :; do sleep 0.02; done`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lock := "lost-" + strings.ReplaceAll(tc.name, " ", "-")
			p := startDLM(t, nil, "run", "--store=redis://"+r.Addr(), "--lock", lock,
				"--ttl", ttl.String(), "--grace", grace.String(), "--", "sh", "-c", tc.script)
			p.stdout.expect(t, "held", 30*time.Second)
			lostAt := time.Now()
			if n, err := rdb.Del(t.Context(), "dlm:{"+lock+"}").Result(); err != nil || n != 1 {
				t.Fatalf("delete the lock key: %d, %v", n, err)
			}
			// Loss is seen within a renewal interval (TTL/3) plus a round
			// trip; the command then has the grace period. The wait only
			// tells a command that is never stopped from one that is; the
			// time is logged.
			code := p.wait(t, 30*time.Second)
			took := time.Since(lostAt)
			t.Logf("dlm run exited %s after the key was deleted (renewal every %s, grace %s)", took, ttl/3, grace)
			if code != exitLost {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
			}
			// The renewal found the key gone: the lease did not just run
			// out at its deadline.
			if !strings.Contains(p.stderr.String(), "no longer holds") {
				t.Errorf("the loss was not noticed by a renewal:\n%s", p.stderr)
			}
			if got := strings.Contains(p.stdout.String(), "got-term"); got == tc.killed {
				t.Errorf("the command's TERM trap ran: %v; output:\n%s", got, p.stdout)
			}
			if tc.killed && took < grace {
				t.Errorf("SIGKILL came %s after the loss, before the %s grace period", took, grace)
			}
			if !strings.Contains(p.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost:\n%s", p.stderr)
			}
		})
	}
}

// On Linux, a dlm run killed with SIGKILL (which it cannot pass on) takes
// its command with it: the kernel's parent-death signal.
func TestRunKilledTakesItsCommandWithIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	store := storeFlag(sharedServer(t))
	p := startDLM(t, nil, "run", store, "--lock", "killed", "--", "sh", "-c", holdScript)
	p.stdout.expect(t, "held", 30*time.Second)
	p.cmd.Process.Kill()
	// The command (sleep, exec'd by sh) held the output pipe open: it
	// closes when the command dies.
	select {
	case <-p.stdout.eof:
	case <-time.After(10 * time.Second):
		t.Fatal("the command still runs 10s after dlm run was killed")
	}
}

// A signal that reaches dlm run while its lock is being granted (the
// grant's script already sent, its answer held back by a proxy until dlm
// run has seen the signal) stops it before the command starts: exit 128+N,
// the command never runs, and the lock is free once dlm run exits. The
// store's client gives the call up at the signal and releases whatever its
// answer turns out to be before the acquisition returns; a lease returned
// as the signal lands is released by dlm run itself.
func TestRunSignalDuringTheGrant(t *testing.T) {
	r := testenv.StartRedis(t)
	// A first run loads the store's scripts: the attempt below is then one
	// call, which goes through once the proxy resumes.
	if code, _, stderr := runDLM(t, nil, "run", "--store=redis://"+r.Addr(), "--lock", "grant", "--", "true"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	px := testenv.StartProxy(t, r.Addr())
	px.Stall()
	cmd := exec.Command(dlmBin(t), "run", "--store=redis://"+px.Addr(), "--lock", "grant", "--log-level=debug", "--", "sh", "-c", "echo ran")
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr := newLineReader(outPipe), newLineReader(errPipe)
	exited := make(chan struct{})
	go func() {
		<-stdout.eof
		<-stderr.eof
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		px.Resume()
		cmd.Process.Kill()
		<-exited
	})
	select {
	case <-px.HeldBack():
	case <-time.After(30 * time.Second):
		t.Fatalf("dlm run sent nothing to the store; stderr:\n%s", stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	stderr.expect(t, "signal while waiting for the lock", 10*time.Second)
	px.Resume()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("dlm run still running 10s after the signal; stderr:\n%s", stderr)
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGTERM), stderr)
	}
	if strings.Contains(stdout.String(), "ran") {
		t.Error("the command ran although dlm run was stopped before it started")
	}
	if code, _, stderr := runDLM(t, nil, "run", "--store=redis://"+r.Addr(), "--lock", "grant", "--wait", "0", "--", "true"); code != 0 {
		t.Errorf("the lock was not released: exit %d; stderr:\n%s", code, stderr)
	}
}

// When the lock is lost and the command ends on SIGTERM but leaves
// processes in its group that ignore it, they get SIGKILL when the grace
// period ends, before dlm run exits 76: none runs on without the lock.
func TestRunLostLockKillsWhatTheCommandLeft(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rdb.Close()
	const grace = 300 * time.Millisecond
	// The subshell and its sleeps ignore SIGTERM and hold the output pipe
	// open: it closes when they die.
	script := `(trap '' TERM; while :; do sleep 0.02; done) & echo held $$; wait`
	p := startDLM(t, nil, "run", "--store=redis://"+r.Addr(), "--lock", "leftovers",
		"--ttl", "3s", "--grace", grace.String(), "--", "sh", "-c", script)
	line := p.stdout.expect(t, "held", 30*time.Second)
	pgid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "held")))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) }) // runs before startDLM's
	lostAt := time.Now()
	if n, err := rdb.Del(t.Context(), "dlm:{leftovers}").Result(); err != nil || n != 1 {
		t.Fatalf("delete the lock key: %d, %v", n, err)
	}
	code := p.wait(t, 30*time.Second)
	if code != exitLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
	}
	if took := time.Since(lostAt); took < grace {
		t.Errorf("the leftovers were gone %s after the loss, before the %s grace period", took, grace)
	}
	if !strings.Contains(p.stderr.String(), "SIGKILL") {
		t.Errorf("stderr does not say the leftovers got SIGKILL:\n%s", p.stderr)
	}
}

// A loss that dlm run first learns of at the release (the store no longer
// held the lock, and no renewal had come yet to notice) still makes it exit
// 76: the command ran, at least in part, without the lock.
func TestRunLossFoundAtRelease(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rdb.Close()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The command ends when the test writes to the fifo; a renewal comes
	// only after 10s (TTL/3).
	p := startDLM(t, []string{"D=" + dir}, "run", "--store=redis://"+r.Addr(), "--lock", "at-release", "--ttl", "30s",
		"--", "sh", "-c", `echo held; read x < "$D/go"`)
	p.stdout.expect(t, "held", 30*time.Second)
	if n, err := rdb.Del(t.Context(), "dlm:{at-release}").Result(); err != nil || n != 1 {
		t.Fatalf("delete the lock key: %d, %v", n, err)
	}
	// Opening the fifo waits for the command to read it; p.wait bounds
	// both.
	go os.WriteFile(fifo, []byte("go\n"), 0o600)
	if code := p.wait(t, 10*time.Second); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `dlm run: lost "at-release"`) {
		t.Errorf("stderr does not say the lock was lost:\n%s", p.stderr)
	}
}

// A command whose path is not valid UTF-8, has control or bidirectional
// formatting characters, or is long, runs: the session label dlm run
// derives from it is made valid for the store.
func TestRunAnyCommandPath(t *testing.T) {
	store := storeFlag(sharedServer(t))
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 200), strings.Repeat("e", 200), strings.Repeat("f", 200))
	if err := os.MkdirAll(filepath.Dir(long), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "not-utf8-\xff"), filepath.Join(dir, "tab\tnewline\nrlo\u202e"), long} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if code, out, stderr := runDLM(t, nil, "run", store, "--lock", "any-path", "--", path); code != 0 || out != "ok\n" {
			t.Errorf("%.40q...: exit %d, output %q; stderr:\n%s", path, code, out, stderr)
		}
	}
}

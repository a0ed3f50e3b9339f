//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

const runUsage = `Usage: dlm run --lock NAME [flags] -- command [args...]

Runs the command while holding the lock NAME, renewing it, and releases it
when the command exits. The command runs in its own process group and gets
DLM_LOCK_NAME and DLM_LOCK_TOKEN (the fencing token) in its environment.
Signals sent to dlm run (INT, TERM, HUP, QUIT, USR1, USR2) go to the command.

If the lock is lost while the command runs, the command's process group gets
SIGTERM at once and SIGKILL after --grace, and dlm run exits 76.

Exit codes:
  the command's own   the command ran and exited
  128+N               the command died of signal N (or dlm run was stopped by
                      signal N before the command started)
  2                   usage error, or a request the store refuses as invalid
                      (such as a name longer than 512 bytes) or does not
                      support (such as --mode pr or -n on redis)
  69                  the store could not be reached (it stayed unreachable for
                      --unavailable-timeout), or refused the request
  75                  the lock was busy: not acquired within --wait
  76                  the lock was lost while the command ran
  126, 127            the command could not be started, or was not found

Flags:
`

// forwarded are the signals dlm run passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runFlags are the settings of `dlm run`.
type runFlags struct {
	lock, mode, store, metadata, logLevel string
	ttl, wait, grace, connect, unavail    time.Duration
	slots                                 int
}

// waitFlag is --wait: unset means wait as long as it takes.
type waitFlag struct {
	d   *time.Duration
	set bool
}

func (w *waitFlag) String() string {
	if w.d == nil || !w.set {
		return "forever"
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration of 0 or more, such as 0 or 30s")
	}
	*w.d, w.set = d, true
	return nil
}

func runRun(ctx context.Context, args []string, stderr io.Writer) int {
	var f runFlags
	fs := flag.NewFlagSet("dlm run", flag.ContinueOnError)
	wait := &waitFlag{d: &f.wait}
	fs.StringVar(&f.lock, "lock", "", "the lock's name (required)")
	fs.StringVar(&f.mode, "mode", "ex", "lock mode: nl, cr, cw, pr, pw or ex (stores other than the dlm server have ex only; postgres also pr)")
	fs.StringVar(&f.store, "store", env("DLM_STORE", storeurl.DefaultURL), "store URL: dlm://, redis://, rediss://, redlock://, postgres:// or etcd:// (env DLM_STORE)")
	fs.DurationVar(&f.ttl, "ttl", dlm.DefaultTTL, "the lock's time to live; it is renewed every ttl/3 while the command runs")
	fs.Var(wait, "wait", "how long to wait for the lock (default: until acquired); 0 gives up at once if it is held")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lock is lost")
	fs.DurationVar(&f.connect, "connect-timeout", 10*time.Second, "how long one attempt to reach the store may take")
	fs.DurationVar(&f.unavail, "unavailable-timeout", dlm.DefaultUnavailableTimeout,
		"give up (exit 69) once the store has not answered for this long; 0 gives up at the first failure. A held lock is waited for regardless (see --wait)")
	fs.IntVar(&f.slots, "n", 0, "make the lock a semaphore of n slots; the command takes one")
	fs.StringVar(&f.metadata, "metadata", "", "a description of this holder shown by dlm ls (default: host, pid and command)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	if code, ok := parseFlags(fs, args, runUsage, stderr); !ok {
		return code
	}
	cmdArgs := fs.Args()
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dlm run: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case f.lock == "":
		return usage("--lock NAME is required")
	case len(cmdArgs) == 0:
		return usage("no command given: dlm run --lock NAME -- command [args...]")
	case f.slots < 0 || f.slots == 1:
		return usage("-n %d: a semaphore needs at least 2 slots (without -n the lock has one holder)", f.slots)
	case f.slots > 0 && f.mode != "ex":
		return usage("-n and --mode do not go together: a semaphore has no modes")
	case f.grace < 0:
		return usage("--grace %s is negative", f.grace)
	case f.connect <= 0:
		return usage("--connect-timeout %s is not positive", f.connect)
	case f.unavail < 0:
		return usage("--unavailable-timeout %s is negative (0 gives up at the first failure)", f.unavail)
	}
	mode, err := dlm.ParseMode(f.mode)
	if err != nil {
		return usage("--mode %q: want nl, cr, cw, pr, pw or ex", f.mode)
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return usage("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	// The Redis client logs each failed dial on its own (a line every few
	// hundred milliseconds while Redis is down); dlm's own warning says it
	// once.
	quietRedis(log)
	if _, err := storeurl.Parse(f.store); err != nil {
		return usage("--store: %s", userMessage(err))
	}
	opts := []dlm.Option{dlm.WithTTL(f.ttl), dlm.WithAutoRenew(true), dlm.WithMode(mode),
		dlm.WithUnavailableTimeout(f.unavail), dlm.WithMetadata(f.metadata)}
	if f.metadata == "" {
		opts[len(opts)-1] = dlm.WithMetadata(defaultMetadata(cmdArgs))
	}
	if wait.set {
		opts = append(opts, dlm.WithWait(f.wait))
	}
	if f.slots > 0 {
		opts = append(opts, dlm.WithSemaphore(f.slots, 1))
	}
	r := &runner{prog: "dlm run", name: f.lock, label: label(cmdArgs), f: f, args: cmdArgs, stderr: stderr, log: log,
		take: func(ctx context.Context, c *dlm.Client) (holding, error) {
			l, err := c.Acquire(ctx, f.lock, opts...)
			if err != nil {
				return nil, err
			}
			return leaseHolding{l, f.lock}, nil
		}}
	return r.run(ctx, r.supervise)
}

// holding is what a command runs under: dlm run's lease, or dlm elect's
// leadership.
type holding interface {
	// Lost is closed when it is lost; Err then says why.
	Lost() <-chan struct{}
	Err() error
	// end gives it up: the lease is released, the leadership resigned.
	end(ctx context.Context) error
	// env is what the command is told of it, as environment variables.
	env() []string
	// token is its fencing token.
	token() uint64
}

// leaseHolding is dlm run's lease on the lock called name.
type leaseHolding struct {
	*dlm.Lease
	name string
}

func (h leaseHolding) end(ctx context.Context) error { return h.Release(ctx) }
func (h leaseHolding) token() uint64                 { return h.Token() }
func (h leaseHolding) env() []string {
	return []string{"DLM_LOCK_NAME=" + h.name, "DLM_LOCK_TOKEN=" + strconv.FormatUint(h.Token(), 10)}
}

// runner is one `dlm run` (or `dlm elect`): it opens the store, takes what
// the command runs under, and serves it.
type runner struct {
	prog   string // the command's name in messages: "dlm run" or "dlm elect"
	name   string // the lock's or the election's name
	label  string // the store session's label
	f      runFlags
	args   []string // the command to run
	stderr io.Writer
	log    *slog.Logger
	// take acquires what the command runs under, from c.
	take func(ctx context.Context, c *dlm.Client) (holding, error)
}

func (r *runner) errorf(format string, a ...any) {
	fmt.Fprintf(r.stderr, r.prog+": "+format+"\n", a...)
}

// run opens the store, takes what the command runs under (abandoning the
// wait on a signal: exit 128+N), and returns serve's exit code; serve gets
// the signals that reach the process from then on.
func (r *runner) run(ctx context.Context, serve func(h holding, sigs <-chan os.Signal) int) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	// Until the command starts, a signal abandons the wait.
	waitCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			r.log.Debug("signal while waiting for the lock", "signal", s)
			cancel(signalError{s.(syscall.Signal)})
		case <-stopWatch:
		}
	}()
	h, store, code := r.acquire(waitCtx)
	close(stopWatch)
	<-watched
	if h == nil {
		return code
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		if err := store.Close(cctx); err != nil {
			r.log.Warn("closing the store", "err", err)
		}
	}()
	// A signal that came while the lock was being granted (the grant's
	// reply was already on its way) still stops the command before it
	// starts.
	var se signalError
	if errors.As(context.Cause(waitCtx), &se) {
		r.errorf("%v while waiting for %q", se, r.name)
		r.release(h)
		return exitSignalBase + int(se.sig)
	}
	return serve(h, sigs)
}

// signalError is the cause of a wait abandoned on a signal.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "stopped by signal " + e.sig.String() }

// acquire opens the store and takes what the command runs under. It
// returns it, or the exit code when there is none.
func (r *runner) acquire(ctx context.Context) (holding, *storeurl.Store, int) {
	fail := func(err error) (holding, *storeurl.Store, int) { return nil, nil, r.fail(ctx, err) }
	store, err := r.open(ctx)
	if err != nil {
		return fail(err)
	}
	c := dlm.New(store.Driver(), dlm.WithLogger(r.log))
	h, err := r.take(ctx, c)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		store.Close(cctx)
		cancel()
		return fail(err)
	}
	r.log.Info("acquired", "lock", r.name, "token", h.token(), "store", store)
	return h, store, 0
}

// fail reports err, which ended the work of ctx, and returns the exit code:
// 128+N if signal N ended ctx, else the code of err.
func (r *runner) fail(ctx context.Context, err error) int {
	var se signalError
	switch {
	case errors.As(context.Cause(ctx), &se):
		r.errorf("%v while waiting for %q", se, r.name)
		return exitSignalBase + int(se.sig)
	case denied(err):
		r.errorf("%s", userMessage(err))
		return exitDenied
	case errors.Is(err, dlm.ErrInvalid) || errors.Is(err, dlm.ErrUnsupported):
		r.errorf("%s", userMessage(err))
		return exitUsage
	case errors.Is(err, dlm.ErrNotAcquired):
		r.errorf("%q is busy: %s", r.name, userMessage(err))
		return exitBusy
	}
	r.errorf("%s", userMessage(err))
	return exitUnavailable
}

// open opens the store. A store that cannot be reached (a dlm server that
// refuses the connection) is tried again, as Acquire does, until it has
// been unreachable for --unavailable-timeout; one warning says so.
func (r *runner) open(ctx context.Context) (*storeurl.Store, error) {
	var since time.Time
	var last error // the failure before an attempt that the bound cut short says more
	backoff := dlm.ExponentialBackoff(10*time.Millisecond, time.Second)
	for attempt := 1; ; attempt++ {
		start := time.Now()
		timeout := r.f.connect
		if r.f.unavail > 0 {
			left := r.f.unavail
			if !since.IsZero() {
				left -= start.Sub(since)
			}
			timeout = min(timeout, max(left, time.Millisecond))
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		store, err := storeurl.Open(cctx, r.f.store, storeOptions(r.label, storeurl.WithLogger(r.log))...)
		cut := cctx.Err() != nil
		cancel()
		if err == nil || !errors.Is(err, dlm.ErrUnavailable) || denied(err) || ctx.Err() != nil {
			return store, err
		}
		if last == nil || !cut {
			last = err
		}
		if since.IsZero() {
			since = start
		}
		if time.Since(since) >= r.f.unavail {
			return nil, unreachable(r.f.store, r.f.unavail, last)
		}
		if attempt == 1 {
			r.log.Warn("dlm: the store is unreachable; retrying for up to "+r.f.unavail.String(),
				"store", storeKind(r.f.store), "url", storeurl.Redact(r.f.store), "err", err)
		}
		t := time.NewTimer(backoff.Backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// unreachable is the error of a store that stayed unreachable for d, as
// package dlm words it for Acquire.
func unreachable(rawURL string, d time.Duration, last error) error {
	return &dlm.UnreachableError{Store: storeKind(rawURL), For: d, Last: last}
}

// storeKind is the kind of store a URL names, such as "redis".
func storeKind(rawURL string) string {
	spec, err := storeurl.Parse(rawURL)
	if err != nil {
		return "unknown"
	}
	return string(spec.Kind)
}

// release gives h up and returns the error, which it reports unless it is
// the loss of h.
func (r *runner) release(h holding) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.end(ctx)
	if err != nil && !errors.Is(err, dlm.ErrLost) {
		r.errorf("release %q: %s", r.name, userMessage(err))
	}
	return err
}

// supervise runs the command under h and returns the exit code.
func (r *runner) supervise(h holding, sigs <-chan os.Signal) (code int) {
	ran := false
	defer func() {
		// A loss first seen at the release (the store no longer held the
		// lock) happened while the command ran.
		if err := r.release(h); ran && code != exitLost && errors.Is(err, dlm.ErrLost) {
			r.errorf("lost %q while the command ran: %s", r.name, userMessage(err))
			code = exitLost
		}
	}()
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), h.env()...)
	cmd.SysProcAttr = commandAttr()
	if err := cmd.Start(); err != nil {
		r.errorf("%v", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	ran = true
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		defer close(done)
		cmd.Wait()
	}()
	signalGroup := func(s syscall.Signal) {
		if err := syscall.Kill(-pgid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
			r.log.Warn("signal the command", "signal", s, "err", err)
		}
	}
	// groupLives reports whether a process of the command's group remains.
	groupLives := func() bool {
		err := syscall.Kill(-pgid, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	lost := h.Lost()
	var kill, leftovers <-chan time.Time
	for {
		select {
		case s := <-sigs:
			signalGroup(s.(syscall.Signal))
		case <-lost:
			lost = nil
			r.errorf("lost %q: %s; stopping the command (SIGTERM, SIGKILL after %s)", r.name, userMessage(h.Err()), r.f.grace)
			signalGroup(syscall.SIGTERM)
			t := time.NewTimer(r.f.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			r.errorf("the command outlived its grace period; SIGKILL")
			signalGroup(syscall.SIGKILL)
			if done == nil { // the command had ended; its group now has too
				return exitLost
			}
		case <-done:
			done = nil
			err := h.Err()
			switch {
			case err == nil:
				return exitCode(cmd.ProcessState)
			case lost != nil:
				r.errorf("lost %q as the command ended: %s", r.name, userMessage(err))
				return exitLost
			case kill != nil && groupLives():
				// The command ended on SIGTERM, but processes it left in
				// its group (children that ignore SIGTERM) still run
				// without the lock: they get SIGKILL when the grace
				// period ends, unless they end first.
				t := time.NewTicker(leftoverPoll)
				defer t.Stop()
				leftovers = t.C
				continue
			}
			return exitLost
		case <-leftovers:
			if !groupLives() {
				return exitLost
			}
		}
	}
}

// leftoverPoll is how often dlm run looks whether the processes a command
// left in its group after a lost lock have ended.
const leftoverPoll = 20 * time.Millisecond

// exitCode is the shell's view of how a process ended.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// label names this process to stores that show sessions. It is valid
// UTF-8 without control or bidirectional formatting characters, and at most
// 200 bytes, whatever the command's path (a session label that is not, the
// store refuses).
func label(args []string) string { return sessionLabel("dlm run", args[0]) }

// sessionLabel is the session label of prog acting for subject (a command
// or an election): valid, and at most 200 bytes, whatever the subject.
func sessionLabel(prog, subject string) string {
	host, _ := os.Hostname()
	if len(subject) > 100 {
		subject = "…" + subject[len(subject)-100:]
	}
	l := fmt.Sprintf("%s %s (%s pid %d)", prog, subject, host, os.Getpid())
	if len(l) > 200 {
		l = l[:200]
	}
	return driver.SanitizeName(l)
}

// defaultMetadata describes the holder for dlm ls.
func defaultMetadata(args []string) string {
	host, _ := os.Hostname()
	m := fmt.Sprintf("%s pid %d: %s", host, os.Getpid(), strings.Join(args, " "))
	if len(m) > 200 {
		m = m[:200]
	}
	return strings.ToValidUTF8(m, "?")
}

// newLogger logs to w at the named level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

const electUsage = `Usage:
  dlm elect [flags] NAME VALUE -- command [args...]
  dlm elect [flags] NAME VALUE
  dlm elect --observe [--json] [flags] NAME
  dlm elect --leader [--json] [flags] NAME

Campaigns in the election NAME with VALUE (such as this node's address), and
once elected runs the command while it leads, as dlm run runs a command under
a lock: in its own process group, passing on the signals dlm elect gets (INT,
TERM, HUP, QUIT, USR1, USR2), with DLM_ELECTION (NAME), DLM_LEADER_VALUE
(VALUE) and DLM_TERM (the term: a fencing token greater than every earlier
leader's) in its environment, and DLM_LOCK_NAME and DLM_LOCK_TOKEN as dlm run
sets them. Candidates are elected in the order they asked, where the store
queues. When the command exits, dlm elect resigns at once, so that the next
candidate is elected without waiting for a TTL, and exits with the command's
code. If the leadership is lost, the command's process group gets SIGTERM at
once and SIGKILL after --grace, and dlm elect exits 76.

Without a command, dlm elect prints the term on a line of its own once
elected, and leads until SIGINT, SIGTERM, SIGHUP or SIGQUIT; then it resigns
and exits 0 (76 if the leadership was lost first).

--observe prints who leads, then each change (a new leader, a new value,
nobody leading), one line each as it happens, until SIGINT or SIGTERM (exit 0):
  term=42 value=node-a since=2026-11-26T02:30:00Z
  none
"none" means nobody leads. The value is quoted (Go syntax) when it is empty
or has spaces, quotes, '=', '\' or characters that are not printable; since
(UTC) is left out where the store does not know it. With --json each line is
an object: election (NAME), leader (whether someone leads), value and term
(the leader's; "" and 0 when nobody leads), since (RFC 3339, left out when
nobody leads or the store does not know):
  {"election":"jobs","leader":true,"value":"node-a","term":42,"since":"2026-11-26T02:30:00Z"}
  {"election":"jobs","leader":false,"value":"","term":0}
Terms only grow along the lines. --leader prints who leads once, in the same
form, and exits 0, or prints "none" and exits 3 when nobody leads. Both need
a store that can read a lock by its name.

Flags go before NAME. On a dlm server a leader that dies unannounced is
replaced when its session expires (the URL's session_ttl, default 10s); on
other stores when its --ttl runs out.

Exit codes:
  the command's own   the command ran and exited (dlm elect resigned)
  0                   --observe was interrupted; --leader printed the
                      leader; without a command, the leader resigned on a
                      signal
  1                   --observe or --leader could not write its output
  2                   usage error (such as an empty NAME, or a VALUE longer
                      than 1024 bytes), or a request the store refuses as
                      invalid or does not support (--observe or --leader on a
                      store that cannot read a lock by its name)
  3                   --leader: nobody leads
  69                  the store could not be reached (it stayed unreachable
                      for --unavailable-timeout), or failed
  75                  not elected within --wait
  76                  the leadership was lost while leading
  77                  a dlm server refused the credentials or rights
  126, 127            the command could not be started, or was not found
  128+N               the command died of signal N (or dlm elect was stopped
                      by signal N before it was elected)

Flags:
`

// electFlags are the settings of `dlm elect`.
type electFlags struct {
	runFlags
	poll                    time.Duration
	observe, leader, asJSON bool
}

func runElect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f electFlags
	fs := flag.NewFlagSet("dlm elect", flag.ContinueOnError)
	wait := &waitFlag{d: &f.wait}
	fs.StringVar(&f.store, "store", env("DLM_STORE", storeurl.DefaultURL), "store URL: dlm://, redis://, rediss://, redlock://, postgres:// or etcd:// (env DLM_STORE)")
	fs.DurationVar(&f.ttl, "ttl", dlm.DefaultTTL, "the leadership's time to live; it is renewed every ttl/3 while leading")
	fs.Var(wait, "wait", "how long to campaign before giving up (default: until elected); 0 gives up at once if someone leads")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the leadership is lost")
	fs.DurationVar(&f.connect, "connect-timeout", 10*time.Second, "how long one attempt to reach the store may take")
	fs.DurationVar(&f.unavail, "unavailable-timeout", dlm.DefaultUnavailableTimeout,
		"give up (exit 69) once the store has not answered for this long; 0 gives up at the first failure")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fs.BoolVar(&f.observe, "observe", false, "print who leads and each change, until interrupted")
	fs.BoolVar(&f.leader, "leader", false, "print who leads, once")
	fs.BoolVar(&f.asJSON, "json", false, "with --observe or --leader: print JSON objects, one a line")
	fs.DurationVar(&f.poll, "poll-interval", dlm.DefaultPollInterval, "with --observe: how often to read a store that cannot push changes")
	if code, ok := parseFlags(fs, args, electUsage, stderr); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "dlm elect: "+format+"\n", a...)
		return exitUsage
	}
	var name, value string
	var cmdArgs []string
	rest := fs.Args()
	switch {
	case f.observe && f.leader:
		return usage("--observe and --leader do not go together")
	case f.observe || f.leader:
		if len(rest) != 1 {
			return usage("want one argument, the election's NAME: dlm elect --observe|--leader NAME")
		}
		name = rest[0]
	case f.asJSON:
		return usage("--json goes with --observe or --leader")
	case len(rest) < 2:
		return usage("want NAME and VALUE: dlm elect [flags] NAME VALUE [-- command [args...]]")
	default:
		name, value, rest = rest[0], rest[1], rest[2:]
		if len(rest) > 0 && rest[0] != "--" {
			return usage("unexpected %q after NAME and VALUE: flags go before NAME, and the command after --", rest[0])
		}
		if len(rest) > 0 {
			if cmdArgs = rest[1:]; len(cmdArgs) == 0 {
				return usage("no command after --")
			}
		}
	}
	if err := checkElection(name, value); err != "" {
		return usage("%s", err)
	}
	switch {
	case f.grace < 0:
		return usage("--grace %s is negative", f.grace)
	case f.connect <= 0:
		return usage("--connect-timeout %s is not positive", f.connect)
	case f.unavail < 0:
		return usage("--unavailable-timeout %s is negative (0 gives up at the first failure)", f.unavail)
	case f.ttl < dlm.MinTTL || f.ttl > dlm.MaxTTL:
		return usage("--ttl %s is outside [%s, %s]", f.ttl, dlm.MinTTL, dlm.MaxTTL)
	case f.poll < dlm.MinPollInterval || f.poll > dlm.MaxTTL:
		return usage("--poll-interval %s is outside [%s, %s]", f.poll, dlm.MinPollInterval, dlm.MaxTTL)
	}
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return usage("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	quietRedis(log)
	if _, err := storeurl.Parse(f.store); err != nil {
		return usage("--store: %s", userMessage(err))
	}
	opts := []dlm.Option{dlm.WithTTL(f.ttl), dlm.WithUnavailableTimeout(f.unavail), dlm.WithPollInterval(f.poll)}
	if wait.set {
		opts = append(opts, dlm.WithWait(f.wait))
	}
	r := &runner{prog: "dlm elect", name: name, label: sessionLabel("dlm elect", name), f: f.runFlags,
		args: cmdArgs, stderr: stderr, log: log}
	switch {
	case f.observe:
		return r.observe(ctx, opts, f.asJSON, stdout)
	case f.leader:
		return r.leader(ctx, opts, f.asJSON, stdout)
	}
	r.take = func(ctx context.Context, c *dlm.Client) (holding, error) {
		l, err := c.Election(name, opts...).Campaign(ctx, value)
		if err != nil {
			return nil, err
		}
		return leaderHolding{l}, nil
	}
	// A candidate handles its own signals: it passes them to the command,
	// or resigns on them.
	ctx = context.WithoutCancel(ctx)
	if len(cmdArgs) == 0 {
		return r.run(ctx, func(h holding, sigs <-chan os.Signal) int { return r.hold(h, sigs, stdout) })
	}
	return r.run(ctx, r.supervise)
}

// checkElection checks an election's name and a candidate's value, and
// says what is wrong with them, if anything.
func checkElection(name, value string) string {
	switch {
	case name == "":
		return "the election's NAME is empty"
	case len(name) > dlm.MaxResourceBytes:
		return fmt.Sprintf("NAME is %d bytes, the limit is %d", len(name), dlm.MaxResourceBytes)
	case len(value) > dlm.MaxMetadataBytes:
		return fmt.Sprintf("VALUE is %d bytes, the limit is %d", len(value), dlm.MaxMetadataBytes)
	}
	if err := driver.CheckName(name); err != nil {
		return fmt.Sprintf("NAME %q: %v", name, err)
	}
	return ""
}

// leaderHolding is dlm elect's leadership.
type leaderHolding struct{ *dlm.Leadership }

func (h leaderHolding) end(ctx context.Context) error { return h.Resign(ctx) }
func (h leaderHolding) token() uint64                 { return h.Term() }
func (h leaderHolding) env() []string {
	name, term := h.Election().Name(), strconv.FormatUint(h.Term(), 10)
	return []string{"DLM_ELECTION=" + name, "DLM_LEADER_VALUE=" + h.Value(), "DLM_TERM=" + term,
		"DLM_LOCK_NAME=" + name, "DLM_LOCK_TOKEN=" + term}
}

// hold leads without a command: it prints the term, then resigns on a
// signal (exit 0) or reports the loss (exit 76).
func (r *runner) hold(h holding, sigs <-chan os.Signal, stdout io.Writer) int {
	fmt.Fprintln(stdout, h.token())
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGUSR1 || s == syscall.SIGUSR2 {
				r.log.Debug("signal ignored while leading", "signal", s)
				continue
			}
			r.log.Info("resigning", "election", r.name, "signal", s)
			if err := r.release(h); errors.Is(err, dlm.ErrLost) {
				r.errorf("lost %q: %s", r.name, userMessage(err))
				return exitLost
			}
			return 0
		case <-h.Lost():
			r.errorf("lost %q: %s", r.name, userMessage(h.Err()))
			r.release(h)
			return exitLost
		}
	}
}

// observe prints the election's leaders until ctx ends.
func (r *runner) observe(ctx context.Context, opts []dlm.Option, asJSON bool, stdout io.Writer) int {
	store, err := r.open(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		return r.fail(ctx, err)
	}
	defer closeStore(store)
	e := dlm.New(store.Driver(), dlm.WithLogger(r.log)).Election(r.name, opts...)
	for ld := range e.Observe(ctx) {
		if err := printLeader(stdout, r.name, ld, asJSON); err != nil {
			r.errorf("writing the output: %v", err)
			return 1
		}
	}
	if ctx.Err() != nil {
		return 0 // interrupted: the usual end
	}
	// Observe ended on its own: the store cannot say who leads, as Leader
	// explains.
	if _, err = e.Leader(ctx); err == nil {
		err = fmt.Errorf("%w: observing %q ended", dlm.ErrUnavailable, r.name)
	}
	return r.fail(ctx, err)
}

// leaderTimeout bounds dlm elect --leader's one read of the store.
const leaderTimeout = 30 * time.Second

// leader prints the election's leader once.
func (r *runner) leader(ctx context.Context, opts []dlm.Option, asJSON bool, stdout io.Writer) int {
	store, err := r.open(ctx)
	if err != nil {
		return r.fail(ctx, err)
	}
	defer closeStore(store)
	e := dlm.New(store.Driver(), dlm.WithLogger(r.log)).Election(r.name, opts...)
	cctx, cancel := context.WithTimeout(ctx, leaderTimeout)
	defer cancel()
	start := time.Now()
	ld, err := e.Leader(cctx)
	code := 0
	switch {
	case errors.Is(err, dlm.ErrNoLeader):
		ld, code = dlm.Leader{}, exitNoLeader
	case err != nil:
		return r.fail(ctx, store.Spec().Unreachable(err, time.Since(start)))
	}
	if err := printLeader(stdout, r.name, ld, asJSON); err != nil {
		r.errorf("writing the output: %v", err)
		return 1
	}
	return code
}

// leaderJSON is one line of dlm elect --observe --json (and --leader
// --json).
type leaderJSON struct {
	Election string     `json:"election"`
	Leader   bool       `json:"leader"`
	Value    string     `json:"value"`
	Term     uint64     `json:"term"`
	Since    *time.Time `json:"since,omitempty"`
}

// printLeader writes ld as one line, in one write, so that a reader of a
// pipe sees each line as soon as it is printed (nothing is buffered).
func printLeader(w io.Writer, election string, ld dlm.Leader, asJSON bool) error {
	if asJSON {
		j := leaderJSON{Election: election, Leader: ld.Term != 0, Value: ld.Value, Term: ld.Term}
		if ld.Term != 0 && !ld.Since.IsZero() {
			since := ld.Since.UTC()
			j.Since = &since
		}
		b, err := json.Marshal(j)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	_, err := io.WriteString(w, leaderText(ld)+"\n")
	return err
}

// leaderText is ld as dlm elect prints it: "none", or
// "term=42 value=node-a since=2026-11-26T02:30:00Z".
func leaderText(ld dlm.Leader) string {
	if ld.Term == 0 {
		return "none"
	}
	s := "term=" + strconv.FormatUint(ld.Term, 10) + " value=" + textValue(ld.Value)
	if !ld.Since.IsZero() {
		s += " since=" + ld.Since.UTC().Format(time.RFC3339)
	}
	return s
}

// textValue is v as is, or quoted in Go syntax when it is empty or has
// anything that would make the line ambiguous: a space, a quote, '=', '\',
// a character that is not printable, or invalid UTF-8.
func textValue(v string) string {
	plain := v != "" && strings.ToValidUTF8(v, "") == v && !strings.ContainsFunc(v, func(c rune) bool {
		return !unicode.IsGraphic(c) || unicode.IsSpace(c) || strings.ContainsRune(`"'=\`, c)
	})
	if plain {
		return v
	}
	return strconv.Quote(v)
}

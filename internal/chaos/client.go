package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"

	"google.golang.org/grpc"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
)

// clientEnv, when set in a process's environment, makes it a chaos client
// (see RunClientIfAsked): its value is the ClientConfig as JSON.
const clientEnv = "DLM_CHAOS_CLIENT"

// ClientConfig configures one client process.
type ClientConfig struct {
	Name       string            `json:"name"`
	SourceIP   string            `json:"source_ip"` // the loopback IP its connections come from
	Servers    string            `json:"servers"`   // the nodes' client proxies, comma-separated
	AddrMap    map[string]string `json:"addr_map"`  // a node's own client address -> its proxy
	Fenced     string            `json:"fenced"`    // the fenced store's URL
	Resources  []string          `json:"resources"`
	SessionTTL time.Duration     `json:"session_ttl"`
	LeaseTTL   time.Duration     `json:"lease_ttl"`
	Wait       time.Duration     `json:"wait"`     // dlm.WithWait of each acquisition
	HoldMin    time.Duration     `json:"hold_min"` // an ordinary critical section lasts
	HoldMax    time.Duration     `json:"hold_max"` // between HoldMin and HoldMax
	Think      time.Duration     `json:"think"`    // at most this between acquisitions
	Seed       uint64            `json:"seed"`
	// CancelShare is the share (0 to 1) of the client's calls (acquire,
	// extend, release) made under a context that ends at a random moment,
	// from 0 to three times the median call time the client measured. A
	// release so cut short is made again on a context that does not end
	// so soon.
	CancelShare float64 `json:"cancel_share,omitempty"`
	// TryLock makes the client one of the strict workload's: every
	// acquisition is a try-lock (WithWait(0)) of Resources[0], recorded
	// with Event.Strict.
	TryLock bool `json:"try_lock,omitempty"`
	// Idle makes the client acquire only on the harness's commands
	// (cmdLong, cmdWait).
	Idle bool `json:"idle,omitempty"`
	// FirstLease numbers the client's first acquisition (a client started
	// again after a kill goes on from a new range).
	FirstLease uint64 `json:"first_lease,omitempty"`
}

// calls makes a client's calls' contexts: a share of them end at a random
// moment within three times the median call time measured so far.
type calls struct {
	share float64
	rng   *rand.Rand
	times []time.Duration // the last calls' durations, a ring
	next  int
}

// defaultCallTime is the median call time assumed before any was measured.
const defaultCallTime = 2 * time.Millisecond

func (c *calls) median() time.Duration {
	if len(c.times) == 0 {
		return defaultCallTime
	}
	s := slices.Clone(c.times)
	slices.Sort(s)
	return s[len(s)/2]
}

// took records the duration of a call that returned an answer.
func (c *calls) took(d time.Duration) {
	const keep = 101
	if len(c.times) < keep {
		c.times = append(c.times, d)
		return
	}
	c.times[c.next] = d
	c.next = (c.next + 1) % keep
}

// ctx returns the context of the next call, derived from parent: for a
// share of calls one that ends at a random moment (a deadline or a
// cancellation, in turn at random), otherwise parent itself. cut reports
// which.
func (c *calls) ctx(parent context.Context) (ctx context.Context, cancel context.CancelFunc, cut bool) {
	if c.share <= 0 || c.rng.Float64() >= c.share {
		return parent, func() {}, false
	}
	d := time.Duration(c.rng.Int64N(int64(3*c.median()) + 1))
	if c.rng.IntN(2) == 0 {
		ctx, cancel = context.WithTimeout(parent, d)
		return ctx, cancel, true
	}
	ctx, end := context.WithCancel(parent)
	t := time.AfterFunc(d, end)
	return ctx, func() { t.Stop(); end() }, true
}

// Commands the harness writes to a client's stdin, one a line. EOF is
// "stop".
const (
	// cmdLong "long RESOURCE DURATION": the next acquisition takes
	// RESOURCE and holds it for DURATION (renewed), ticking writes.
	cmdLong = "long"
	// cmdWait "wait RESOURCE DURATION": the next acquisition takes
	// RESOURCE, waiting for it until DURATION has passed (again after a
	// failed attempt, its context never cut short): a waiter that waits
	// through a whole leader flap, so that the takeover it measures is
	// the server's (history.PropTakeover).
	cmdWait = "wait"
	// cmdStop: finish the current acquisition, close the session, exit.
	cmdStop = "stop"
)

// RunClientIfAsked runs this process as a chaos client, and exits, if the
// harness started it as one (an environment variable says so). Call it first
// thing in main, or in TestMain: the harness starts clients by running its
// own executable again.
func RunClientIfAsked() {
	spec, ok := os.LookupEnv(clientEnv)
	if !ok {
		return
	}
	var cfg ClientConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos client: bad config: %v\n", err)
		os.Exit(2)
	}
	os.Exit(runClient(cfg, os.Stdin, os.Stdout, os.Stderr))
}

// emitter writes events as JSON lines, flushed at once so that the harness
// sees them as they happen.
type emitter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	name string
	err  error
}

func (em *emitter) emit(e history.Event) {
	e.Client = em.name
	b, _ := json.Marshal(e)
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.err != nil {
		return
	}
	em.w.Write(append(b, '\n'))
	em.err = em.w.Flush()
}

// longHold is a command's acquisition: a long hold (cmdLong), or a
// waiter's (cmdWait, until set).
type longHold struct {
	resource string
	hold     time.Duration
	until    time.Time
}

// deadlinePoll is how often a client looks at a held lease's deadline to
// record its moves (a recorded deadline is at most this stale; the checker
// takes the latest recorded one).
const deadlinePoll = 5 * time.Millisecond

// runClient is the client workload: it loops acquiring one of a few
// resources (EX, with a TTL, auto-renewed), writes to the fenced store
// inside the critical section, holds a little, releases; and records every
// step on stdout, stamped with the monotonic clock.
func runClient(cfg ClientConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	em := &emitter{w: bufio.NewWriter(stdout), name: cfg.Name}
	lvl := slog.LevelWarn
	if cfg.Idle { // the flap waiter: its reconnections are part of its figure
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))

	stopCtx, stop := context.WithCancel(context.Background())
	defer stop()
	longs := make(chan longHold, 4)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 3 && f[0] == cmdLong:
				if d, err := time.ParseDuration(f[2]); err == nil {
					longs <- longHold{resource: f[1], hold: d}
				}
			case len(f) == 3 && f[0] == cmdWait:
				if d, err := time.ParseDuration(f[2]); err == nil {
					longs <- longHold{resource: f[1], until: time.Now().Add(d)}
				}
			case len(f) == 1 && f[0] == cmdStop:
				stop()
				return
			}
		}
		stop() // EOF: the harness is gone or done
	}()

	src := &net.TCPAddr{IP: net.ParseIP(cfg.SourceIP)}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if p, ok := cfg.AddrMap[addr]; ok {
			addr = p
		}
		d := net.Dialer{LocalAddr: src}
		return d.DialContext(ctx, "tcp", addr)
	}
	var store *dlmserver.Store
	for {
		ctx, cancel := context.WithTimeout(stopCtx, 5*time.Second)
		var err error
		store, err = dlmserver.Dial(ctx, cfg.Servers, dlmserver.WithSessionTTL(cfg.SessionTTL), dlmserver.WithLabel(cfg.Name),
			dlmserver.WithLogger(log), dlmserver.WithDialOptions(grpc.WithContextDialer(dialer)))
		cancel()
		if err == nil {
			break
		}
		if stopCtx.Err() != nil {
			return 0
		}
		log.Warn("chaos client: dial", "err", err)
		time.Sleep(100 * time.Millisecond)
	}
	em.emit(history.Event{At: history.Now(), Kind: history.Note, Note: "session open"})
	c := dlm.New(store, dlm.WithLogger(log))
	fc := newFencedClient(cfg.Fenced)
	cs := &calls{share: cfg.CancelShare, rng: rand.New(rand.NewPCG(cfg.Seed, 0xca11))}

	seq := cfg.FirstLease
	for stopCtx.Err() == nil {
		seq++
		res := cfg.Resources[rng.IntN(len(cfg.Resources))]
		if cfg.TryLock {
			res = cfg.Resources[0]
		}
		hold := cfg.HoldMin + time.Duration(rng.Int64N(int64(cfg.HoldMax-cfg.HoldMin)+1))
		var job *longHold
		select {
		case lh := <-longs:
			job = &lh
		default:
			if cfg.Idle { // it waits for a command
				select {
				case lh := <-longs:
					job = &lh
				case <-stopCtx.Done():
					continue
				}
			}
		}
		if job != nil {
			res = job.resource
			if job.until.IsZero() {
				hold = job.hold
			}
		}
		if !acquire(stopCtx, c, fc, em, cs, cfg, seq, res, hold, job) && job != nil &&
			(job.until.IsZero() || time.Now().Before(job.until)) {
			longs <- *job // the harness waits for it: try again
		}
		if think := time.Duration(rng.Int64N(int64(cfg.Think) + 1)); think > 0 {
			select {
			case <-time.After(think):
			case <-stopCtx.Done():
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := store.Close(ctx); err != nil {
		log.Warn("chaos client: close", "err", err)
	}
	em.emit(history.Event{At: history.Now(), Kind: history.Note, Note: "done"})
	if em.err != nil {
		return 1
	}
	return 0
}

// acquire is one acquisition and its critical section; it reports whether
// the lock was granted. job, if not nil, is the harness's command it
// carries out (a long hold, or a waiter's wait).
func acquire(stopCtx context.Context, c *dlm.Client, fc *fencedClient, em *emitter, cs *calls, cfg ClientConfig, seq uint64, res string, hold time.Duration, job *longHold) bool {
	long := job != nil && job.until.IsZero()
	waiter := job != nil && !long
	ev := func(k history.Kind, token uint64, note string) history.Event {
		return history.Event{At: history.Now(), Kind: k, Lease: seq, Resource: res, Token: token, Note: note}
	}
	note := ""
	switch {
	case long:
		note = "long hold " + hold.String()
	case waiter:
		note = "flap waiter"
	}
	req := ev(history.Requested, 0, note)
	req.Strict = cfg.TryLock
	em.emit(req)
	wait := cfg.Wait
	switch {
	case cfg.TryLock:
		wait = 0
	case long:
		wait = max(wait, 5*time.Second)
	case waiter:
		wait = max(time.Until(job.until), time.Millisecond)
	}
	actx, cancel, cut := cs.ctx(stopCtx)
	if waiter { // its wait is the measure: never cut short
		actx, cancel, cut = stopCtx, func() {}, false
	}
	began := time.Now()
	l, err := c.Acquire(actx, res, dlm.WithTTL(cfg.LeaseTTL), dlm.WithWait(wait), dlm.WithAutoRenew(true))
	ended := actx.Err() != nil
	cancel()
	if cut {
		note = strings.TrimSpace(note + " (context cut short)")
	}
	if err != nil {
		f := ev(history.AcquireFailed, 0, err.Error())
		if cut {
			f.Note += " (context cut short)"
		}
		// An answer is a refusal (ErrNotAcquired) within the call's
		// context; anything else may have been granted, and withdrawn
		// since.
		f.Unsure = !errors.Is(err, dlm.ErrNotAcquired) || ended
		// A single attempt that the store refused to send (dlmserver's
		// checks before sending: no connection, no live session) did
		// nothing. The store has no error value for it: its message says.
		if wait == 0 && f.Unsure && (strings.Contains(err.Error(), "not connected to the dlm server") ||
			strings.Contains(err.Error(), "no live session with the dlm server")) {
			f.Unsure, f.Unsent = false, true
		}
		em.emit(f)
		if !errors.Is(err, dlm.ErrNotAcquired) {
			select { // the store is unavailable: do not spin
			case <-time.After(20 * time.Millisecond):
			case <-stopCtx.Done():
			}
		}
		return false
	}
	if wait == 0 || job == nil {
		cs.took(time.Since(began))
	}
	token := l.Token()
	deadline := l.Deadline()
	g := ev(history.Granted, token, note)
	g.Deadline = history.Monotonic(deadline)
	em.emit(g)

	// Record Lost the moment it fires, and each move of the deadline (the
	// client's own view of its validity: renewals, session keepalives).
	lost := l.Lost()
	released := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(deadlinePoll)
		defer tick.Stop()
		for {
			select {
			case <-lost:
				em.emit(ev(history.Lost, token, l.Err().Error()))
				return
			case <-released:
				select { // lost just as the release returned
				case <-lost:
					em.emit(ev(history.Lost, token, "seen at release: "+l.Err().Error()))
				default:
				}
				return
			case <-tick.C:
				if d := l.Deadline(); d.After(deadline) {
					deadline = d
					v := ev(history.Valid, token, "")
					v.Deadline = history.Monotonic(d)
					em.emit(v)
				}
			}
		}
	}()
	// valid is the client's check before it acts under the lock: its
	// deadline has not passed. (Between the check and the act the process
	// may be paused: that is what the fence is for.)
	valid := func() bool { return time.Now().Before(l.Deadline()) }

	// The critical section: writes with the token, a hold, a last write;
	// it stops at a loss, at its deadline, or when the fence rejects the
	// token. The
	// section's own work ignores the stop request: it finishes first.
	ctx := context.Background()
	start := history.Now()
	w := Write{Resource: res, Token: token, Client: cfg.Name, Lease: seq, Phase: "begin", Start: start}
	done := !valid() || fc.write(ctx, w) != nil
	if !done {
		end := time.NewTimer(hold)
		var tick <-chan time.Time
		if long {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			tick = t.C
		}
	hold:
		for {
			select {
			case <-end.C:
				break hold
			case <-lost:
				break hold
			case <-tick:
				w.Phase = "tick"
				if !valid() || fc.write(ctx, w) != nil {
					done = true
					break hold
				}
				// An extension besides the renewals, its context cut
				// short at times: a failed one leaves the lease valid
				// until its deadline (which the watcher records).
				ectx, cancel, _ := cs.ctx(ctx)
				if err := l.Extend(ectx); err != nil && !errors.Is(err, dlm.ErrLost) && ectx.Err() == nil {
					em.emit(ev(history.Note, token, "extend: "+err.Error()))
				}
				cancel()
			}
		}
		end.Stop()
	}
	select {
	case <-lost:
	default:
		if !done && valid() {
			w.Phase, w.End = "end", history.Now()
			_ = fc.write(ctx, w)
		}
	}
	em.emit(ev(history.ReleaseSent, token, ""))
	err = release(ctx, l, em, cs, ev(history.Note, token, ""))
	close(released)
	<-watched
	note = ""
	if err != nil {
		note = err.Error()
	}
	em.emit(ev(history.Released, token, note))
	return true
}

// release releases l, on a context cut short at times (see calls), and
// again, up to 5 tries of 5s each, while a try ends by its context or the
// store cannot be reached: a careful holder frees what it holds. It returns
// the last try's error; note is the event that records a try cut short.
func release(ctx context.Context, l *dlm.Lease, em *emitter, cs *calls, note history.Event) error {
	for try := 1; ; try++ {
		base, cancelBase := context.WithTimeout(ctx, 5*time.Second)
		rctx, cancel := base, context.CancelFunc(func() {})
		if try == 1 {
			rctx, cancel, _ = cs.ctx(base)
		}
		began := time.Now()
		err := l.Release(rctx)
		ended := rctx.Err() != nil
		cancel()
		cancelBase()
		switch {
		case err == nil:
			if !ended {
				cs.took(time.Since(began))
			}
			return nil
		case errors.Is(err, dlm.ErrLost), errors.Is(err, dlm.ErrNotHeld), try == 5:
			return err
		case !ended && !errors.Is(err, dlm.ErrUnavailable):
			return err
		}
		note.At, note.Note = history.Now(), fmt.Sprintf("release try %d cut short: %v", try, err)
		em.emit(note)
	}
}

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/dlmhq/dlm/internal/chaos/history"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	// KillLeader: kill -9 the leader; heal: restart it (same data).
	KillLeader = "kill-leader"
	// KillFollower: kill -9 a follower; heal: restart it.
	KillFollower = "kill-follower"
	// StopLeader: SIGSTOP the leader for longer than the election timeout;
	// heal: SIGCONT.
	StopLeader = "stop-leader"
	// PartitionLeader: cut the leader off from the other nodes and from
	// every client; heal: mend.
	PartitionLeader = "partition-leader"
	// PauseClient: SIGSTOP a client process while it holds a lock, past its
	// TTLs; heal: SIGCONT.
	PauseClient = history.FaultPauseClient
	// IsolateClient: cut a client holding a lock off from every node, past
	// its session TTL; heal: mend. Its lease must end on its side before
	// anyone else is granted the lock.
	IsolateClient = "isolate-client"
)

// AllFaults are the fault kinds, in the order a run cycles through them
// (shuffled per cycle).
var AllFaults = []string{KillLeader, KillFollower, StopLeader, PartitionLeader, PauseClient, IsolateClient}

// LeaderFaults are the faults that make the cluster change leader.
var LeaderFaults = []string{KillLeader, StopLeader, PartitionLeader}

// Config configures a run.
type Config struct {
	Bin string // the dlm binary the nodes run
	Dir string // where data, logs and the history go

	Nodes     int // default 3
	Clients   int // default 3
	Resources int // default 2

	RaftTimeout time.Duration // the nodes' -raft-timeout (heartbeat and election timeout); default 100ms
	// SessionMargin is the nodes' -session-margin; default 200ms. After a
	// fault that cost clients their sessions, the locks of those sessions
	// are freed when the new leader expires them, at its promotion + the
	// session TTL + this margin: with a 1s TTL, the server's default 1s
	// margin would hold them past the recovery bound (election timeout +
	// 1s) after a 1s fault. The margin adds slack, not safety: clients
	// count their sessions from keepalive send times.
	SessionMargin time.Duration
	SessionTTL    time.Duration // the clients' session TTL; default 1s
	LeaseTTL      time.Duration // the clients' lease TTL (auto-renewed); default 1s

	// Faults are the fault kinds to cycle through, shuffled in each cycle
	// unless FixedOrder; default AllFaults.
	Faults     []string
	FixedOrder bool
	Rounds     int           // stop after this many rounds (0: no limit)
	Duration   time.Duration // start no round after this (0: no limit)
	// Hold is how long a node fault lasts before it is healed; default
	// 1s, and never less than 5 election timeouts.
	Hold time.Duration
	// ClientHold is how long a client fault lasts; default twice the
	// longer of the session and lease TTLs.
	ClientHold time.Duration
	// Settle is the normal operation between a recovery and the next
	// fault; default 500ms.
	Settle time.Duration
	// RecoveryBound is property 5's bound; default the election timeout +
	// 1s.
	RecoveryBound time.Duration
	// StopOnViolation ends the run after the first round whose history
	// shows a violation.
	StopOnViolation bool
	Seed            uint64
	Log             io.Writer // progress, one line per round; nil discards
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Clients == 0 {
		c.Clients = 3
	}
	if c.Resources == 0 {
		c.Resources = 2
	}
	def(&c.RaftTimeout, 100*time.Millisecond)
	def(&c.SessionMargin, 200*time.Millisecond)
	def(&c.SessionTTL, time.Second)
	def(&c.LeaseTTL, time.Second)
	def(&c.Hold, max(time.Second, 5*c.RaftTimeout))
	def(&c.ClientHold, 2*max(c.SessionTTL, c.LeaseTTL))
	def(&c.Settle, 500*time.Millisecond)
	def(&c.RecoveryBound, c.RaftTimeout+time.Second)
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Result is a run's outcome.
type Result struct {
	Report  *history.Report
	Events  []history.Event // the history, sorted
	History string          // the history's file (JSON lines)
	Dir     string
	Errors  []string // trouble of the harness itself (not violations)
}

// client is one client process.
type client struct {
	name, ip string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{}
	log      string
	mu       sync.Mutex
	stopped  bool
}

func (c *client) signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.cmd.Process.Signal(sig); err != nil {
		return err
	}
	c.stopped = sig == syscall.SIGSTOP
	return nil
}

func (c *client) command(line string) {
	_, _ = io.WriteString(c.stdin, line+"\n")
}

type harness struct {
	cfg      Config
	h        *history.History
	fenced   *FencedStore
	net      *Net
	cluster  *Cluster
	clients  []*client // every client process
	workers  []*client // those of the workload (not the probe)
	rng      *rand.Rand
	errs     []string
	errMu    sync.Mutex
	resource []string
}

func (hs *harness) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	hs.errMu.Lock()
	hs.errs = append(hs.errs, msg)
	hs.errMu.Unlock()
	fmt.Fprintf(hs.cfg.Log, "chaos: %s\n", msg)
}

func (hs *harness) logf(format string, args ...any) {
	fmt.Fprintf(hs.cfg.Log, format+"\n", args...)
}

// Run runs a fault-injection run: a cluster, its proxies, the fenced store
// and the client processes; rounds of faults; then it stops everything and
// checks the history. It returns an error only when the run could not be
// set up; trouble during the run is in Result.Errors, violations in the
// report.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.setDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Dir: cfg.Dir, History: filepath.Join(cfg.Dir, "history.jsonl")}
	live, err := os.Create(filepath.Join(cfg.Dir, "history.live.jsonl"))
	if err != nil {
		return nil, err
	}
	defer live.Close()
	hs := &harness{cfg: cfg, h: history.NewHistory(live), net: NewNet(), rng: rand.New(rand.NewPCG(cfg.Seed, 0xc4a05))}
	for i := range cfg.Resources {
		hs.resource = append(hs.resource, fmt.Sprintf("r%d", i))
	}
	defer hs.net.Close()
	if hs.fenced, err = StartFenced(hs.h); err != nil {
		return nil, err
	}
	defer hs.fenced.Close()
	hs.cluster, err = StartCluster(ctx, ClusterConfig{Bin: cfg.Bin, Dir: cfg.Dir, Nodes: cfg.Nodes,
		RaftTimeout: cfg.RaftTimeout, SessionMargin: cfg.SessionMargin}, hs.net)
	if err != nil {
		return nil, err
	}
	defer hs.cluster.Close()
	leader, err := hs.cluster.Leader(ctx, 20*time.Second)
	if err != nil {
		return nil, err
	}
	hs.logf("cluster up: leader %s; election timeout %s, session TTL %s, lease TTL %s, recovery bound %s",
		leader.ID, cfg.RaftTimeout, cfg.SessionTTL, cfg.LeaseTTL, cfg.RecoveryBound)
	if err := hs.startClients(ctx); err != nil {
		hs.stopClients()
		return nil, err
	}
	hs.rounds(ctx)
	hs.stopClients()
	hs.cluster.Close()

	res.Events = hs.h.Events()
	res.Report = history.Check(res.Events, history.CheckConfig{RecoveryBound: cfg.RecoveryBound})
	if f, err := os.Create(res.History); err == nil {
		if err := history.WriteEvents(f, res.Events); err != nil {
			hs.errorf("write history: %v", err)
		}
		f.Close()
	}
	for _, c := range hs.clients {
		if b, err := os.ReadFile(c.log); err == nil && strings.Contains(string(b), "DATA RACE") {
			hs.errorf("%s: data race reported, see %s", c.name, c.log)
		}
	}
	res.Errors = hs.errs
	return res, nil
}

// startClients starts the client processes (this executable again, see
// RunClientIfAsked) and waits until each has opened its session.
func (hs *harness) startClients(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	from := hs.h.Len()
	// The workers contend for the resources; the probe takes a resource
	// of its own, uncontended, as often as it can: its grants show when
	// the cluster serves, whatever the workers are waiting for. It is
	// never the victim of a client fault.
	for i := range hs.cfg.Clients + 1 {
		c := &client{name: fmt.Sprintf("client-%d", i+1), ip: fmt.Sprintf("127.0.0.%d", 21+i), done: make(chan struct{})}
		cc := ClientConfig{Name: c.name, SourceIP: c.ip, Servers: hs.cluster.ClientAddrs(), AddrMap: hs.cluster.AddrMap(),
			Fenced: hs.fenced.URL(), Resources: hs.resource, SessionTTL: hs.cfg.SessionTTL, LeaseTTL: hs.cfg.LeaseTTL,
			Wait: 300 * time.Millisecond, HoldMin: time.Millisecond, HoldMax: 10 * time.Millisecond, Think: 20 * time.Millisecond,
			Seed: hs.cfg.Seed*100 + uint64(i)}
		if i == hs.cfg.Clients {
			c.name, c.ip = "probe", "127.0.0.20"
			cc.Name, cc.SourceIP, cc.Resources = c.name, c.ip, []string{"probe"}
			cc.Wait, cc.HoldMax, cc.Think = time.Second, time.Millisecond, 5*time.Millisecond
		}
		hs.net.Name(c.ip, c.name)
		spec, _ := json.Marshal(cc)
		c.cmd = exec.Command(exe)
		c.cmd.Env = append(os.Environ(), clientEnv+"="+string(spec))
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		c.log = filepath.Join(hs.cfg.Dir, c.name+".log")
		logf, err := os.Create(c.log)
		if err != nil {
			return err
		}
		c.cmd.Stderr = logf
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			return err
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := c.cmd.Start(); err != nil {
			logf.Close()
			return err
		}
		logf.Close() // the child has its own descriptor
		hs.clients = append(hs.clients, c)
		if c.name != "probe" {
			hs.workers = append(hs.workers, c)
		}
		go hs.readClient(c, out)
	}
	for _, c := range hs.clients {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := hs.h.Await(wctx, from, func(e history.Event) bool {
			return e.Client == c.name && ((e.Kind == history.Note && e.Note == "session open") || e.Kind == history.Exited)
		})
		cancel()
		if err != nil {
			return fmt.Errorf("chaos: %s did not open its session: %w (see %s)", c.name, err, c.log)
		}
	}
	return nil
}

// readClient adds a client's events to the history as they come, and its
// exit at the end.
func (hs *harness) readClient(c *client, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e history.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			hs.errorf("%s: unreadable event %q: %v", c.name, sc.Text(), err)
			continue
		}
		hs.h.Add(e)
	}
	err := c.cmd.Wait()
	note := "exit 0"
	if err != nil {
		note = err.Error()
	}
	hs.h.Add(history.Event{At: history.Now(), Kind: history.Exited, Client: c.name, Note: note})
	close(c.done)
}

// stopClients asks every client to stop (each finishes its acquisition and
// closes its session), and kills those that do not exit in time.
func (hs *harness) stopClients() {
	for _, c := range hs.clients {
		c.mu.Lock()
		if c.stopped {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			c.stopped = false
		}
		c.mu.Unlock()
		c.command(cmdStop)
		c.stdin.Close()
	}
	for _, c := range hs.clients {
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			hs.errorf("%s did not stop; killed", c.name)
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}

// rounds runs fault rounds until the configured limits or ctx ends.
func (hs *harness) rounds(ctx context.Context) {
	start := time.Now()
	var order []string
	for round := 1; ctx.Err() == nil; round++ {
		if hs.cfg.Rounds > 0 && round > hs.cfg.Rounds {
			return
		}
		if hs.cfg.Duration > 0 && time.Since(start) >= hs.cfg.Duration {
			return
		}
		if len(order) == 0 {
			order = slices.Clone(hs.cfg.Faults)
			if !hs.cfg.FixedOrder {
				hs.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			}
		}
		kind := order[0]
		order = order[1:]
		if err := hs.round(ctx, round, kind); err != nil {
			if ctx.Err() == nil {
				hs.errorf("round %d (%s): %v", round, kind, err)
			}
			return
		}
		if hs.cfg.StopOnViolation {
			if r := history.Check(hs.h.Events(), history.CheckConfig{RecoveryBound: hs.cfg.RecoveryBound}); r.TotalViolations() > 0 {
				hs.logf("round %d: %d violations so far; stopping", round, r.TotalViolations())
				return
			}
		}
	}
}

// round injects one fault, holds it, heals it and waits for grants to
// resume.
func (hs *harness) round(ctx context.Context, round int, kind string) error {
	// One fault at a time, on a healthy cluster: a node restarted by the
	// last round must have caught up before the next fault.
	leader, took, err := hs.cluster.AwaitHealthy(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	if took > 100*time.Millisecond {
		hs.logf("round %d: waited %s for every node to catch up with %s", round, took.Round(time.Millisecond), leader.ID)
	}
	// Grants flow before anything is broken.
	if _, err := hs.awaitGrant(ctx, hs.h.Len(), history.Now(), 10*time.Second); err != nil {
		return fmt.Errorf("no grant before the fault: %w", err)
	}

	// Arrange for the fault to hit a lock that is held, with someone
	// waiting for it: a client takes a resource for a long hold.
	victim := hs.workers[hs.rng.IntN(len(hs.workers))]
	hold := hs.cfg.Hold
	if kind == PauseClient || kind == IsolateClient {
		hold = hs.cfg.ClientHold
	}
	// The hold outlasts the fault: the lock is held across the fail-over
	// and the heal. (Other clients' waits are short, so they move on to
	// other resources meanwhile.)
	long := hold + time.Second
	res := hs.resource[hs.rng.IntN(len(hs.resource))]
	from := hs.h.Len()
	victim.command(fmt.Sprintf("%s %s %s", cmdLong, res, long))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	g, err := hs.h.Await(wctx, from, func(e history.Event) bool {
		return e.Client == victim.name && e.Kind == history.Granted && strings.HasPrefix(e.Note, "long")
	})
	cancel()
	if err != nil {
		return fmt.Errorf("%s did not get its long hold: %w", victim.name, err)
	}
	wctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	_, _ = hs.h.Await(wctx, from, func(e history.Event) bool { // best effort
		return e.Client != victim.name && e.Kind == history.Requested && e.Resource == res && e.At > g.At
	})
	cancel()

	f := history.Event{Kind: history.Fault, Round: round, Fault: kind}
	var heal func() error
	switch kind {
	case KillLeader, KillFollower:
		n := leader
		if kind == KillFollower {
			n = hs.follower(leader)
		}
		f.Target, f.At = n.ID, history.Now()
		n.Kill()
		heal = func() error { // even when the run is interrupted: leave no node down
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return n.Restart(rctx)
		}
	case StopLeader:
		f.Target, f.At = leader.ID, history.Now()
		if err := leader.Stop(); err != nil {
			return err
		}
		heal = leader.Cont
	case PartitionLeader:
		f.Target, f.At = leader.ID, history.Now()
		for _, n := range hs.cluster.Nodes {
			if n != leader {
				hs.net.Cut(leader.ID, n.ID)
			}
		}
		for _, c := range hs.clients {
			hs.net.Cut(leader.ID, c.name)
		}
		heal = func() error { hs.net.MendAll(); return nil }
	case PauseClient:
		f.Target, f.At = victim.name, history.Now()
		if err := victim.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		heal = func() error { return victim.signal(syscall.SIGCONT) }
	case IsolateClient:
		f.Target, f.At = victim.name, history.Now()
		for _, n := range hs.cluster.Nodes {
			hs.net.Cut(victim.name, n.ID)
		}
		heal = func() error { hs.net.MendAll(); return nil }
	default:
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	f.Note = fmt.Sprintf("%s holds %s (token %d)", victim.name, res, g.Token)
	hs.h.Add(f)

	select { // the fault lasts: this is a duration, not a synchronisation
	case <-time.After(hold):
	case <-ctx.Done():
	}

	herr := heal()
	h := history.Event{At: history.Now(), Kind: history.Heal, Round: round, Fault: kind, Target: f.Target}
	if herr != nil {
		h.Note = herr.Error()
	}
	mark := hs.h.Len()
	hs.h.Add(h)
	if herr != nil {
		return fmt.Errorf("heal: %w", herr)
	}
	next, err := hs.awaitGrant(ctx, mark, h.At, hs.cfg.RecoveryBound+5*time.Second)
	rec := "none"
	if err == nil {
		rec = time.Duration(next.At - h.At).Round(100 * time.Microsecond).String()
	}
	hs.logf("round %d: %-16s %-8s held %s, grants resumed %s after the heal", round, kind, f.Target, hold, rec)

	select {
	case <-time.After(hs.cfg.Settle):
	case <-ctx.Done():
	}
	return nil
}

// awaitGrant waits for a Granted event stamped after the instant after,
// looking at events added at index from or later.
func (hs *harness) awaitGrant(ctx context.Context, from int, after int64, timeout time.Duration) (history.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return hs.h.Await(ctx, from, func(e history.Event) bool { return e.Kind == history.Granted && e.At > after })
}

// follower picks a running node other than the leader.
func (hs *harness) follower(leader *Node) *Node {
	var fs []*Node
	for _, n := range hs.cluster.Nodes {
		if n != leader && n.Running() {
			fs = append(fs, n)
		}
	}
	if len(fs) == 0 {
		return leader
	}
	return fs[hs.rng.IntN(len(fs))]
}

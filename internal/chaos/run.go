package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"
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
	// FlapLeader: the client holding a lock (the victim) is paused
	// (SIGSTOP) or killed (SIGKILL), in turn, then the leader is killed -9
	// every half TTL (the killed node started again at once) for
	// Config.FlapFor; heal: the victim is resumed, or started again. The
	// checker times the takeover: from the victim's death to another
	// client's grant of its resource, within 2 TTL + 2 election timeouts
	// (history.PropTakeover).
	FlapLeader = history.FaultFlapLeader
	// FillDisk: fill the disk of the leader or of a follower, in turn (each
	// node's data dir is a tmpfs of its own, which needs root), until its
	// log's writes fail, and hold it full; heal: free the space. The other
	// nodes go on serving; the full node says why it cannot
	// (dlm_server_storage_failing) and catches up once it can write.
	FillDisk = "fill-disk"
)

// Each node's disk for FillDisk (Config.DiskSize) and its log segments:
// small, so that a full disk stops the writes within a round.
const (
	defaultDiskSize = 32 << 20
	fillSegmentSize = 64 << 10 // raftnode.MinLogSegmentSize
)

// AllFaults are the fault kinds, in the order a run cycles through them
// (shuffled per cycle).
// FillDisk is left out where mounting is not allowed (see Run).
var AllFaults = []string{KillLeader, KillFollower, StopLeader, PartitionLeader, PauseClient, IsolateClient, FlapLeader, FillDisk}

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
	// CancelShare is the share (0 to 1) of the workers' calls (acquire,
	// extend, release) whose contexts end at a random moment, within three
	// times the median call time (ClientConfig.CancelShare): a standing
	// fault, beside the rounds'. Default 0.
	CancelShare float64
	// TryClients is the number of clients of the strict workload: each
	// loops on try-locks (WithWait(0)) of one resource of their own
	// ("try"), released at once, judged by porcupine against the strict
	// model (refusals only while held). Default 0. Their calls are cut
	// short too, at CancelShare.
	TryClients int
	// FlapFor is how long a FlapLeader round kills the leader every half
	// TTL; default 10 TTL (the longer of the session and lease TTLs).
	FlapFor time.Duration
	// TakeoverBound is property 6's bound (a flap's victim's death to
	// another client's grant); default 2 TTL + 2 election timeouts.
	TakeoverBound time.Duration
	// LinearizeTimeout bounds porcupine's check of the run's history
	// (history.CheckConfig.LinearizeTimeout); default 2 minutes.
	LinearizeTimeout time.Duration
	// DiskSize is the size of each node's tmpfs when FillDisk is among
	// the faults; default 32 MiB.
	DiskSize int64
	Seed     uint64
	Log      io.Writer // progress, one line per round; nil discards
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
	def(&c.FlapFor, 10*c.ttl())
	def(&c.TakeoverBound, 2*c.ttl()+2*c.RaftTimeout)
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.DiskSize <= 0 {
		c.DiskSize = defaultDiskSize
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ttl is the longer of the session and lease TTLs: how long a dead
// client's lock may outlive it.
func (c *Config) ttl() time.Duration { return max(c.SessionTTL, c.LeaseTTL) }

// checkConfig is what the checker is given.
func (c *Config) checkConfig() history.CheckConfig {
	return history.CheckConfig{RecoveryBound: c.RecoveryBound, TakeoverBound: c.TakeoverBound, LinearizeTimeout: c.LinearizeTimeout}
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
	spec     ClientConfig
	starts   int // processes started under this name (a killed one is started again)
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
	c.mu.Lock()
	stdin := c.stdin
	c.mu.Unlock()
	_, _ = io.WriteString(stdin, line+"\n")
}

// process returns the running process's stdin and its done channel.
func (c *client) process() (io.WriteCloser, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stdin, c.done
}

type harness struct {
	cfg      Config
	h        *history.History
	fenced   *FencedStore
	net      *Net
	cluster  *Cluster
	clients  []*client // every client process
	workers  []*client // those of the workload (not the probe)
	waiter   *client   // the flap rounds' waiter (FlapLeader), or nil
	rng      *rand.Rand
	errs     []string
	errMu    sync.Mutex
	resource []string
	flaps    int // FlapLeader rounds so far: they pause and kill their victims in turn
	fills    int // FillDisk rounds so far: they fill the leader's and a follower's disk in turn
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
	ccfg := ClusterConfig{Bin: cfg.Bin, Dir: cfg.Dir, Nodes: cfg.Nodes, RaftTimeout: cfg.RaftTimeout, SessionMargin: cfg.SessionMargin}
	if slices.Contains(hs.cfg.Faults, FillDisk) {
		if os.Geteuid() == 0 {
			ccfg.DiskSize, ccfg.LogSegmentSize = cfg.DiskSize, fillSegmentSize
		} else {
			hs.cfg.Faults = slices.DeleteFunc(slices.Clone(hs.cfg.Faults), func(k string) bool { return k == FillDisk })
			hs.logf("%s left out: a tmpfs for each node's data needs root", FillDisk)
			if len(hs.cfg.Faults) == 0 {
				return nil, fmt.Errorf("chaos: no fault to inject (%s needs root)", FillDisk)
			}
		}
	}
	hs.cluster, err = StartCluster(ctx, ccfg, hs.net)
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
	res.Report = history.Check(res.Events, cfg.checkConfig())
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
	// The workers contend for the resources; the probe takes a resource
	// of its own, uncontended, as often as it can: its grants show when
	// the cluster serves, whatever the workers are waiting for. It is
	// never the victim of a client fault; nor are the strict workload's
	// clients, which try-lock a resource of their own.
	n := hs.cfg.Clients + 1 + hs.cfg.TryClients
	for i := range n {
		c := &client{name: fmt.Sprintf("client-%d", i+1), ip: fmt.Sprintf("127.0.0.%d", 21+i)}
		cc := ClientConfig{Name: c.name, SourceIP: c.ip, Servers: hs.cluster.ClientAddrs(), AddrMap: hs.cluster.AddrMap(),
			Fenced: hs.fenced.URL(), Resources: hs.resource, SessionTTL: hs.cfg.SessionTTL, LeaseTTL: hs.cfg.LeaseTTL,
			Wait: 300 * time.Millisecond, HoldMin: time.Millisecond, HoldMax: 10 * time.Millisecond, Think: 20 * time.Millisecond,
			Seed: hs.cfg.Seed*100 + uint64(i), CancelShare: hs.cfg.CancelShare}
		switch {
		case i == hs.cfg.Clients:
			c.name, c.ip = "probe", "127.0.0.20"
			cc.Name, cc.SourceIP, cc.Resources = c.name, c.ip, []string{"probe"}
			cc.Wait, cc.HoldMax, cc.Think, cc.CancelShare = time.Second, time.Millisecond, 5*time.Millisecond, 0
		case i > hs.cfg.Clients:
			c.name = fmt.Sprintf("try-%d", i-hs.cfg.Clients)
			cc.Name, cc.Resources, cc.TryLock = c.name, []string{"try"}, true
			cc.HoldMax, cc.Think = 3*time.Millisecond, 5*time.Millisecond
		}
		c.spec = cc
		hs.net.Name(c.ip, c.name)
		from := hs.h.Len()
		if err := hs.startClient(c); err != nil {
			return err
		}
		hs.clients = append(hs.clients, c)
		if i < hs.cfg.Clients {
			hs.workers = append(hs.workers, c)
		}
		if err := hs.awaitSession(ctx, c, from); err != nil {
			return err
		}
	}
	if !slices.Contains(hs.cfg.Faults, FlapLeader) {
		return nil
	}
	// The flap rounds' waiter waits for the victim's resource through the
	// whole flap, on a session whose TTL outlasts it: what its grant
	// measures is how soon the server frees a dead client's lock, not
	// how the waiter's own session fares (a worker's 1 s session can
	// end under leaders killed every half TTL, and with it its place in
	// the queue). It acquires nothing else.
	c := &client{name: "waiter", ip: "127.0.0.19"}
	c.spec = ClientConfig{Name: c.name, SourceIP: c.ip, Servers: hs.cluster.ClientAddrs(), AddrMap: hs.cluster.AddrMap(),
		Fenced: hs.fenced.URL(), Resources: hs.resource, SessionTTL: hs.cfg.FlapFor + hs.cfg.TakeoverBound + 5*time.Second,
		LeaseTTL: hs.cfg.LeaseTTL, HoldMin: time.Millisecond, HoldMax: 10 * time.Millisecond, Seed: hs.cfg.Seed*100 + 99, Idle: true}
	hs.net.Name(c.ip, c.name)
	from := hs.h.Len()
	if err := hs.startClient(c); err != nil {
		return err
	}
	hs.clients, hs.waiter = append(hs.clients, c), c
	return hs.awaitSession(ctx, c, from)
}

// startClient starts c's process (again, after a kill: its acquisitions
// are then numbered from a new range).
func (hs *harness) startClient(c *client) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cc := c.spec
	cc.FirstLease = uint64(c.starts) * 1_000_000
	cc.Seed += uint64(c.starts) * 7919
	c.starts++
	spec, _ := json.Marshal(cc)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), clientEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.log = filepath.Join(hs.cfg.Dir, c.name+".log")
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.stdin, c.done, c.stopped = cmd, stdin, done, false
	c.mu.Unlock()
	go hs.readClient(c, cmd, out, done)
	return nil
}

// awaitSession waits until c, started when the history had from events,
// has opened its session.
func (hs *harness) awaitSession(ctx context.Context, c *client, from int) error {
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := hs.h.Await(wctx, from, func(e history.Event) bool {
		return e.Client == c.name && ((e.Kind == history.Note && e.Note == "session open") || e.Kind == history.Exited)
	})
	if err != nil {
		return fmt.Errorf("chaos: %s did not open its session: %w (see %s)", c.name, err, c.log)
	}
	return nil
}

// readClient adds a client's events to the history as they come, and its
// exit at the end.
func (hs *harness) readClient(c *client, cmd *exec.Cmd, out io.Reader, done chan struct{}) {
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
	err := cmd.Wait()
	note := "exit 0"
	if err != nil {
		note = err.Error()
	}
	hs.h.Add(history.Event{At: history.Now(), Kind: history.Exited, Client: c.name, Note: note})
	close(done)
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
		stdin, _ := c.process()
		stdin.Close()
	}
	for _, c := range hs.clients {
		_, done := c.process()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			hs.errorf("%s did not stop; killed", c.name)
			_ = c.signal(syscall.SIGKILL)
			<-done
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
			if r := history.Check(hs.h.Events(), hs.cfg.checkConfig()); r.TotalViolations() > 0 {
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
		if ctx.Err() == nil {
			hs.cluster.DumpStacks() // the run ends here: see each node's log
			err = fmt.Errorf("%w (the nodes' goroutines are at the end of their logs)", err)
		}
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
	switch kind {
	case PauseClient, IsolateClient:
		hold = hs.cfg.ClientHold
	case FlapLeader:
		hold = hs.cfg.FlapFor
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
	if w := hs.waiter; kind == FlapLeader && w != nil {
		// A waiter that waits through the whole flap: the takeover it
		// measures is the server's, not a worker's gap between waits.
		from := hs.h.Len()
		w.command(fmt.Sprintf("%s %s %s", cmdWait, res, hold+hs.cfg.TakeoverBound+2*time.Second))
		wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		_, err := hs.h.Await(wctx, from, func(e history.Event) bool {
			return e.Client == w.name && e.Kind == history.Requested && e.Resource == res && e.Note == "flap waiter"
		})
		cancel()
		if err != nil {
			return fmt.Errorf("%s did not start waiting for %s: %w", w.name, res, err)
		}
	} else {
		wctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		_, _ = hs.h.Await(wctx, from, func(e history.Event) bool { // best effort
			return e.Client != victim.name && e.Kind == history.Requested && e.Resource == res && e.At > g.At
		})
		cancel()
	}

	f := history.Event{Kind: history.Fault, Round: round, Fault: kind}
	var heal func() error
	last := func() error { // the fault lasts: this is a duration, not a synchronisation
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return nil
	}
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
	case FlapLeader:
		pause := hs.flaps%2 == 0
		hs.flaps++
		f.Target, f.Resource, f.At = victim.name, res, history.Now()
		if pause {
			f.Stopped = true
			if err := victim.signal(syscall.SIGSTOP); err != nil {
				return err
			}
			heal = func() error { return victim.signal(syscall.SIGCONT) }
		} else {
			_, done := victim.process()
			if err := victim.signal(syscall.SIGKILL); err != nil {
				return err
			}
			heal = func() error { // started again under its name, once the old process is gone
				<-done
				from := hs.h.Len()
				if err := hs.startClient(victim); err != nil {
					return err
				}
				return hs.awaitSession(context.Background(), victim, from)
			}
		}
		last = func() error { return hs.flapLeader(ctx, round, hold) }
	case FillDisk:
		n := leader
		if hs.fills%2 == 1 {
			n = hs.follower(leader)
		}
		hs.fills++
		f.Target, f.At = n.ID, history.Now()
		if err := n.FillDisk(); err != nil {
			_ = n.FreeDisk()
			return err
		}
		heal = n.FreeDisk
		last = func() error {
			hs.awaitStorageFailing(ctx, round, n, f.At)
			select { // then it stays full: a duration, not a synchronisation
			case <-time.After(hold):
			case <-ctx.Done():
			}
			return nil
		}
	default:
		return fmt.Errorf("unknown fault kind %q", kind)
	}
	f.Note = fmt.Sprintf("%s holds %s (token %d)", victim.name, res, g.Token)
	if kind == FlapLeader {
		how := "killed"
		if f.Stopped {
			how = "paused"
		}
		f.Note = fmt.Sprintf("%s %s, holding %s (token %d)", victim.name, how, res, g.Token)
	}
	faultAt := hs.h.Len()
	hs.h.Add(f)

	lerr := last()
	herr := heal()
	if herr == nil {
		herr = lerr
	}
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
	if kind == FlapLeader {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		t, err := hs.h.Await(wctx, faultAt, func(e history.Event) bool {
			return e.Kind == history.Granted && e.Resource == res && e.Client != victim.name && e.At > f.At
		})
		cancel()
		took := "none"
		if err == nil {
			took = time.Duration(t.At - f.At).Round(100 * time.Microsecond).String()
		}
		hs.logf("round %d: %s: %s was granted %s %s after the victim's death (bound %s)", round, kind, t.Client, res, took, hs.cfg.TakeoverBound)
	}

	select {
	case <-time.After(hs.cfg.Settle):
	case <-ctx.Done():
	}
	return nil
}

// flapLeader kills -9 the leader every half TTL for d, starting each
// killed node again at once, and records each kill (a Note naming the
// node). With no leader within a half TTL it goes on to the next period. A
// leader found less than a quarter TTL before its period ends serves that
// quarter first: killed as soon as it serves, no client could reach it,
// and the flap would measure the machine's elections, not the cluster
// (TestDeadClientLosesItsLocksWhenLeadersServeBriefly in dlmserver covers
// leaders killed at once). Leaders still change more often than a TTL.
func (hs *harness) flapLeader(ctx context.Context, round int, d time.Duration) error {
	period := hs.cfg.ttl() / 2
	serve := hs.cfg.ttl() / 4
	end := time.Now().Add(d)
	kills := 0
	for ctx.Err() == nil && time.Now().Before(end) {
		next := time.Now().Add(period)
		if leader, err := hs.cluster.Leader(ctx, period); err == nil {
			if wait := serve - time.Until(next); wait > 0 { // a duration, not a synchronisation
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
			hs.h.Add(history.Event{At: history.Now(), Kind: history.Note, Round: round, Target: leader.ID, Note: "flap: kill -9 the leader"})
			leader.Kill()
			kills++
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // leave no node down
			err := leader.Restart(rctx)
			cancel()
			if err != nil {
				return fmt.Errorf("flap: restart %s: %w", leader.ID, err)
			}
		}
		select { // the period: a duration, not a synchronisation
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
		}
	}
	hs.logf("round %d: %s: %d leaders killed in %s", round, FlapLeader, kills, d)
	return nil
}

// awaitStorageFailing waits until n, whose disk was filled at the instant
// filled, says its log's writes fail (it writes into its preallocated
// segment until that is full), up to 10 s, and records when.
func (hs *harness) awaitStorageFailing(ctx context.Context, round int, n *Node, filled int64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	for {
		if failing, _ := n.StorageFailing(ctx, hc); failing {
			at := history.Now()
			from := hs.h.Len()
			hs.h.Add(history.Event{At: at, Kind: history.Note, Round: round, Target: n.ID, Note: "disk full: the log's writes fail"})
			next := "none within 5s"
			if g, err := hs.awaitGrant(ctx, from, at, 5*time.Second); err == nil {
				next = time.Duration(g.At-at).Round(100*time.Microsecond).String() + " later"
			}
			hs.logf("round %d: %s: %s's log writes fail %s after its disk was filled; the next grant %s", round, FillDisk, n.ID,
				time.Duration(at-filled).Round(time.Millisecond), next)
			return
		}
		t := time.NewTimer(20 * time.Millisecond) // the node offers no event to wait on
		select {
		case <-ctx.Done():
			t.Stop()
			hs.logf("round %d: %s: %s still writes 10s after its disk was filled (room left in its segment)", round, FillDisk, n.ID)
			return
		case <-t.C:
		}
	}
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

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/storeurl"
)

// electWait bounds every wait of these tests for something that should
// happen: it tells "never" from "eventually", not fast from slow.
const electWait = 30 * time.Second

// inspects reports whether the store behind a --store flag can read a lock
// by its name (driver.Inspector), which dlm elect --observe and --leader
// need.
func inspects(t *testing.T, storeFlag string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), electWait)
	defer cancel()
	st, err := storeurl.Open(ctx, strings.TrimPrefix(storeFlag, "--store="))
	if err != nil {
		t.Fatalf("open %s: %v", storeFlag, err)
	}
	defer closeStore(st)
	_, ok := st.Driver().(driver.Inspector)
	return ok
}

// electStores are the stores that the elections of these tests run on, by
// name: each returns the --store flag of a running store.
var electStores = map[string]func(t *testing.T) string{
	"dlm":      dlmAndRedis["dlm"],
	"redis":    dlmAndRedis["redis"],
	"postgres": func(t *testing.T) string { return "--store=" + testenv.StartPostgres(t).DSN() },
	"etcd": func(t *testing.T) string {
		return "--store=etcd://" + strings.TrimPrefix(testenv.StartEtcd(t).Endpoint(), "http://")
	},
}

// skipUnlessInspects skips a test, or a part of one, that needs --observe
// or --leader on a store that cannot serve them yet.
func skipUnlessInspects(t *testing.T, kind string, ok bool) {
	t.Helper()
	if !ok {
		t.Skipf("the %s store does not implement driver.Inspector yet: this waits for the stores' election support (Inspect, Watch) to be merged", kind)
	}
}

// A candidate is elected, paused past its TTL (as by a long GC pause) and
// deposed, killed with SIGKILL and replaced when its session or TTL runs
// out, and resigns when its command exits; each leader writes its term to a
// fenced register. Checked: one command runs at a time (but for the paused
// leader's, which the register fences off), terms grow, a current leader's
// writes are accepted and the deposed leader's late writes refused, the
// exit codes, and (with a store that can say who leads) that an observer
// saw the leaders in order with the terms the commands got.
func TestElectFailover(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a killed candidate's command is stopped by the parent-death signal, which is Linux's")
	}
	stores := map[string]func(t *testing.T) string{
		// A dead candidate's leadership ends with its dlm server session.
		"dlm":   func(t *testing.T) string { return storeFlag(sharedServer(t), "session_ttl="+shortTTL.String()) },
		"redis": dlmAndRedis["redis"],
		// A dead candidate's leadership ends with its lease's TTL.
		"etcd": electStores["etcd"],
	}
	for kind, storeOf := range stores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			failover(t, kind, storeOf(t))
		})
	}
}

// shortTTL is the TTL (and dlm server session TTL) of the candidates that
// TestElectFailover pauses and kills; it leaves a loaded machine room for
// late renewals and keepalives.
const shortTTL = 3 * time.Second

func failover(t *testing.T, kind, store string) {
	name := "elect-failover-" + kind
	reg := newRegister(t, name)
	candidate := func(value string, ttl time.Duration) *proc {
		return startDLM(t, []string{"DLM_ELECT_TEST_REGISTER=" + reg.url}, "elect", store, "--ttl", ttl.String(),
			"--grace", "5s", name, value, "--", testBinary(t), "-test.run=^TestElectHelperCommand$")
	}
	observing := inspects(t, store)
	var obs *observer
	if observing {
		obs = startObserver(t, store, name)
		obs.await(t, 0)
	}

	// a leads; b campaigns.
	a := candidate("a", shortTTL)
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) }) // before startDLM's cleanup
	wa := reg.next(t)
	want(t, wa, "a", "first", true)
	obs.await(t, wa.Term)
	b := candidate("b", shortTTL)

	// a is paused past its TTL: b is elected, and a's command, deposed
	// without knowing it, writes late and is refused, as is its write
	// when dlm elect, resumed, finds the leadership lost and stops it.
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wb := reg.next(t)
	want(t, wb, "b", "first", true)
	obs.await(t, wb.Term)
	reg.order(wa.Term, "write")
	want(t, reg.next(t), "a", "asked", false)
	a.cmd.Process.Signal(syscall.SIGCONT)
	want(t, reg.next(t), "a", "stopped", false)
	if code := a.wait(t, electWait); code != exitLost {
		t.Fatalf("the deposed candidate exited %d, want %d; stderr:\n%s", code, exitLost, a.stderr)
	}
	if !strings.Contains(a.stderr.String(), `dlm elect: lost "`+name+`"`) {
		t.Errorf("the deposed candidate does not say it lost:\n%s", a.stderr)
	}

	// b dies: the next candidate is elected when b's session (dlm) or TTL
	// (redis) runs out. It resigns when its command exits: the last one is
	// elected at once, although its predecessor's TTL is an hour.
	c, d := candidate("c", time.Hour), candidate("d", time.Hour)
	awaitList(t, store, name, func(r resourceJSON) bool { return len(r.Waiters) == 2 })
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.wait(t, electWait)
	wx := reg.next(t)
	if wx.Value != "c" && wx.Value != "d" {
		t.Fatalf("write %+v, want one by c or d", wx)
	}
	x, y, yv := c, d, "d"
	if wx.Value == "d" {
		x, y, yv = d, c, "c"
	}
	want(t, wx, wx.Value, "first", true)
	obs.await(t, wx.Term)
	reg.order(wx.Term, "exit")
	wy := reg.next(t)
	want(t, wy, yv, "first", true)
	if code := x.wait(t, electWait); code != 7 {
		t.Errorf("the candidate whose command exited 7 exited %d; stderr:\n%s", code, x.stderr)
	}
	obs.await(t, wy.Term)

	// SIGTERM reaches the last leader's command, which writes once more
	// and exits 0; dlm elect resigns and exits 0: nobody leads.
	y.cmd.Process.Signal(syscall.SIGTERM)
	want(t, reg.next(t), yv, "stopped", true)
	if code := y.wait(t, electWait); code != 0 {
		t.Errorf("the last candidate exited %d after SIGTERM, want its command's 0; stderr:\n%s", code, y.stderr)
	}
	obs.await(t, 0)

	terms := []uint64{wa.Term, wb.Term, wx.Term, wy.Term}
	if !slices.IsSorted(terms) || len(slices.Compact(slices.Clone(terms))) != len(terms) {
		t.Errorf("terms in the order the leaders were elected: %v, want strictly increasing", terms)
	}
	for _, s := range reg.startsSnapshot() {
		if s.env != "" {
			t.Errorf("the command of term %d: %s", s.term, s.env)
		}
		// Only the paused leader may still run when the next starts.
		if len(s.running) > 0 && (s.value != "b" || !slices.Equal(s.running, []uint64{wa.Term})) {
			t.Errorf("the command of term %d (%s) started while those of terms %v ran", s.term, s.value, s.running)
		}
	}
	t.Run("observer", func(t *testing.T) {
		skipUnlessInspects(t, kind, observing)
		obs.check(t, name, terms)
	})
}

// want checks a write to the register.
func want(t *testing.T, w fencedWrite, value, why string, accepted bool) {
	t.Helper()
	if w.Value != value || w.Why != why || w.Accepted != accepted {
		t.Fatalf("write %+v, want value %q, %s, accepted %v", w, value, why, accepted)
	}
	if w.Term == 0 {
		t.Fatalf("write %+v without a term", w)
	}
}

// testBinary is this test binary, which runs as the candidates' command.
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestElectHelperCommand is not a test: it is the command that the
// candidates of TestElectFailover run (this test binary, run again), which
// reports its start and writes its term to the test's fenced register.
func TestElectHelperCommand(t *testing.T) {
	reg := os.Getenv("DLM_ELECT_TEST_REGISTER")
	if reg == "" {
		t.Skip("the command TestElectFailover's candidates run, not a test of its own")
	}
	os.Exit(electHelper(reg))
}

// electHelper reports its start, writes its term, then writes again or
// exits 7 when the test says so, and on SIGTERM writes once more and exits
// 0.
func electHelper(reg string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	term, value := os.Getenv("DLM_TERM"), os.Getenv("DLM_LEADER_VALUE")
	post := func(path string, q url.Values) error {
		resp, err := http.PostForm(reg+path, q)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	write := func(why string) error {
		return post("/write", url.Values{"term": {term}, "value": {value}, "why": {why}})
	}
	if err := post("/start", url.Values{"term": {term}, "value": {value}, "pid": {strconv.Itoa(os.Getpid())},
		"election": {os.Getenv("DLM_ELECTION")}, "lock": {os.Getenv("DLM_LOCK_NAME")}, "token": {os.Getenv("DLM_LOCK_TOKEN")}}); err != nil {
		return 1
	}
	if err := write("first"); err != nil {
		return 1
	}
	orders := make(chan string)
	go func() {
		defer close(orders)
		for {
			resp, err := http.Get(reg + "/order?term=" + term)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			orders <- string(b)
		}
	}()
	for {
		select {
		case <-sigs:
			write("stopped")
			return 0
		case o, ok := <-orders:
			switch {
			case !ok:
				return 1
			case o == "write":
				write("asked")
			case o == "exit":
				return 7
			}
		}
	}
}

// register is a fenced register, as a resource that leaders write to
// should be: it refuses a write whose term is lower than the highest it
// has accepted. It serves the commands of TestElectFailover's candidates
// over HTTP on loopback, records their starts and writes, and passes them
// the test's orders.
type register struct {
	url      string
	election string
	events   chan fencedWrite
	done     chan struct{}

	mu      sync.Mutex
	highest uint64
	starts  []commandStart
	orders  map[uint64]chan string
}

// fencedWrite is one write to the register.
type fencedWrite struct {
	Term     uint64
	Value    string
	Why      string // "first", "asked" (ordered by the test) or "stopped" (on SIGTERM)
	Accepted bool
}

// commandStart is a command's start, as it reported it.
type commandStart struct {
	term    uint64
	value   string
	pid     int
	env     string   // what is wrong with its environment, if anything
	running []uint64 // the terms of earlier commands still running then
}

func newRegister(t *testing.T, election string) *register {
	r := &register{election: election, events: make(chan fencedWrite, 64), done: make(chan struct{}),
		orders: map[uint64]chan string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", r.start)
	mux.HandleFunc("POST /write", r.write)
	mux.HandleFunc("GET /order", r.order1)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(r.done)
		srv.Close()
	})
	r.url = srv.URL
	return r
}

func (r *register) start(w http.ResponseWriter, req *http.Request) {
	s := commandStart{value: req.FormValue("value")}
	s.term, _ = strconv.ParseUint(req.FormValue("term"), 10, 64)
	s.pid, _ = strconv.Atoi(req.FormValue("pid"))
	if e, l, tok := req.FormValue("election"), req.FormValue("lock"), req.FormValue("token"); e != r.election || l != r.election || tok != req.FormValue("term") || s.term == 0 {
		s.env = fmt.Sprintf("DLM_ELECTION=%q DLM_LOCK_NAME=%q DLM_LOCK_TOKEN=%q DLM_TERM=%q, want the election %q and one term",
			e, l, tok, req.FormValue("term"), r.election)
	}
	r.mu.Lock()
	for _, earlier := range r.starts {
		if processRuns(earlier.pid) {
			s.running = append(s.running, earlier.term)
		}
	}
	r.starts = append(r.starts, s)
	r.mu.Unlock()
}

func (r *register) write(w http.ResponseWriter, req *http.Request) {
	fw := fencedWrite{Value: req.FormValue("value"), Why: req.FormValue("why")}
	fw.Term, _ = strconv.ParseUint(req.FormValue("term"), 10, 64)
	r.mu.Lock()
	if fw.Accepted = fw.Term >= r.highest; fw.Accepted {
		r.highest = fw.Term
	}
	r.mu.Unlock()
	select {
	case r.events <- fw:
	case <-r.done:
	}
	if !fw.Accepted {
		w.WriteHeader(http.StatusConflict)
	}
}

// order1 answers a command's next order, when the test gives it.
func (r *register) order1(w http.ResponseWriter, req *http.Request) {
	term, _ := strconv.ParseUint(req.FormValue("term"), 10, 64)
	select {
	case o := <-r.orderChan(term):
		io.WriteString(w, o)
	case <-req.Context().Done():
	case <-r.done:
		w.WriteHeader(http.StatusGone)
	}
}

func (r *register) orderChan(term uint64) chan string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.orders[term]
	if !ok {
		ch = make(chan string, 1)
		r.orders[term] = ch
	}
	return ch
}

// order tells the command of term to "write" again or "exit".
func (r *register) order(term uint64, o string) { r.orderChan(term) <- o }

// next returns the next write.
func (r *register) next(t *testing.T) fencedWrite {
	t.Helper()
	select {
	case w := <-r.events:
		return w
	case <-time.After(electWait):
		t.Fatalf("no write to the register within %s", electWait)
		return fencedWrite{}
	}
}

func (r *register) startsSnapshot() []commandStart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.starts)
}

// processRuns reports whether the process pid runs (a zombie does not).
func processRuns(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the command's name may hold anything.
	_, rest, _ := strings.Cut(string(b[strings.LastIndexByte(string(b), ')')+1:]), " ")
	return rest != "" && rest[0] != 'Z' && rest[0] != 'X'
}

// observer is a dlm elect --observe --json process.
type observer struct{ p *proc }

func startObserver(t *testing.T, store, name string) *observer {
	return &observer{startDLM(t, nil, "elect", "--observe", "--json", store, name)}
}

// await waits for the observer to print the leader of term (0: nobody
// leading). A nil observer (the store cannot say who leads) awaits
// nothing.
func (o *observer) await(t *testing.T, term uint64) {
	t.Helper()
	if o == nil {
		return
	}
	timer := time.NewTimer(electWait)
	defer timer.Stop()
	for {
		select {
		case line := <-o.p.stdout.lines:
			var j leaderJSON
			if err := json.Unmarshal([]byte(line), &j); err != nil {
				t.Fatalf("observer printed %q: %v", line, err)
			}
			if j.Term == term && j.Leader == (term != 0) {
				return
			}
			if term != 0 && j.Term > term {
				t.Fatalf("observer printed term %d while the test awaited %d", j.Term, term)
			}
		case <-o.p.stdout.eof:
			t.Fatalf("observer ended awaiting term %d; stderr:\n%s", term, o.p.stderr)
		case <-timer.C:
			t.Fatalf("observer did not print term %d within %s; output:\n%s\nstderr:\n%s", term, electWait, o.p.stdout, o.p.stderr)
		}
	}
}

// check checks everything the observer printed: one JSON object a line,
// about the election, whose leaders are terms, in order.
func (o *observer) check(t *testing.T, election string, terms []uint64) {
	var got []uint64
	for line := range strings.Lines(o.p.stdout.String()) {
		var j leaderJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("observer printed %q: %v", line, err)
		}
		switch {
		case j.Election != election:
			t.Errorf("observer printed another election: %q", line)
		case j.Leader != (j.Term != 0), !j.Leader && (j.Value != "" || j.Since != nil):
			t.Errorf("observer printed an inconsistent line: %q", line)
		case j.Leader:
			got = append(got, j.Term)
		}
	}
	if !slices.Equal(got, terms) {
		t.Errorf("observer saw the leaders of terms %v, want %v", got, terms)
	}
}

// Without a command, a candidate prints its term when elected and leads
// until a signal, then resigns at once: the next, waiting, is elected
// with a higher term (on Redis and etcd, a leader that did not resign would
// hold on for its TTL of an hour). A candidate with --wait 0 is busy while
// someone leads.
func TestElectHolds(t *testing.T) {
	for kind, storeOf := range electStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store := storeOf(t)
			name := "elect-hold-" + kind
			a := startDLM(t, nil, "elect", store, "--ttl", "1h", name, "a")
			ta := termLine(t, a)
			b := startDLM(t, nil, "elect", store, name, "b")
			awaitWaiters(t, store, name, 1)
			if code, _, stderr := runDLM(t, nil, "elect", store, "--wait", "0", name, "c"); code != exitBusy {
				t.Fatalf("--wait 0 while a leads: exit %d, want %d; stderr:\n%s", code, exitBusy, stderr)
			}
			a.cmd.Process.Signal(syscall.SIGTERM)
			if code := a.wait(t, electWait); code != 0 {
				t.Fatalf("the leader exited %d on SIGTERM, want 0; stderr:\n%s", code, a.stderr)
			}
			if tb := termLine(t, b); tb <= ta {
				t.Fatalf("term %d after term %d", tb, ta)
			}
			b.cmd.Process.Signal(syscall.SIGINT)
			if code := b.wait(t, electWait); code != 0 {
				t.Fatalf("the leader exited %d on SIGINT, want 0; stderr:\n%s", code, b.stderr)
			}
			if code, _, stderr := runDLM(t, nil, "elect", store, "--wait", "0", name, "c", "--", "true"); code != 0 {
				t.Fatalf("--wait 0 after both resigned: exit %d; stderr:\n%s", code, stderr)
			}
		})
	}
}

// On PostgreSQL a leader killed with SIGKILL is replaced at once, whatever
// its TTL: the server drops a dead connection's advisory locks, and the
// waiting candidate's lock statement returns. An observer in a third
// process sees both leaders in order.
func TestElectPostgresKilledLeader(t *testing.T) {
	store := electStores["postgres"](t)
	name := "elect-killed"
	obs := startObserver(t, store, name)
	obs.await(t, 0)
	a := startDLM(t, nil, "elect", store, "--ttl", "1h", name, "a")
	ta := termLine(t, a)
	obs.await(t, ta)
	b := startDLM(t, nil, "elect", store, "--ttl", "1h", name, "b")
	awaitWaiters(t, store, name, 1)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tb := termLine(t, b)
	if tb <= ta {
		t.Fatalf("term %d after term %d", tb, ta)
	}
	obs.await(t, tb)
	b.cmd.Process.Signal(syscall.SIGTERM)
	if code := b.wait(t, electWait); code != 0 {
		t.Fatalf("the leader exited %d on SIGTERM, want 0; stderr:\n%s", code, b.stderr)
	}
	obs.await(t, 0)
	obs.p.cmd.Process.Signal(syscall.SIGTERM)
	obs.p.wait(t, electWait)
	obs.check(t, name, []uint64{ta, tb})
}

// awaitWaiters waits until n requests wait for the election's lock, read
// through the store's Inspect.
func awaitWaiters(t *testing.T, storeFlag, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), electWait)
	defer cancel()
	st, err := storeurl.Open(ctx, strings.TrimPrefix(storeFlag, "--store="))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(st)
	in := st.Driver().(driver.Inspector)
	for {
		info, err := in.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters on %q within %s, want %d", len(info.Waiters), name, electWait, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// termLine reads the term a candidate without a command prints.
func termLine(t *testing.T, p *proc) uint64 {
	t.Helper()
	line := p.stdout.expect(t, "", electWait)
	n, err := strconv.ParseUint(line, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("dlm elect printed %q, want its term", line)
	}
	return n
}

// A leadership lost while holding without a command exits 76. The loss is
// made by deleting the lock's key in Redis; the TTL leaves a loaded
// machine room for late renewals before then.
func TestElectHoldLost(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer rdb.Close()
	p := startDLM(t, nil, "elect", "--store=redis://"+r.Addr(), "--ttl", "3s", "elect-lost", "a")
	termLine(t, p)
	if n, err := rdb.Del(t.Context(), "dlm:{elect-lost}").Result(); err != nil || n != 1 {
		t.Fatalf("delete the lock key: %d, %v", n, err)
	}
	if code := p.wait(t, electWait); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `dlm elect: lost "elect-lost"`) {
		t.Errorf("stderr does not say the leadership was lost:\n%s", p.stderr)
	}
}

// The command gets the election, the value and the term (also as the lock
// and token of dlm run), and its exit code is dlm elect's; the next leader
// gets a higher term.
func TestElectCommand(t *testing.T) {
	store := storeFlag(sharedServer(t))
	script := `echo "$DLM_ELECTION|$DLM_LEADER_VALUE|$DLM_TERM|$DLM_LOCK_NAME|$DLM_LOCK_TOKEN"; exit 3`
	var last uint64
	for range 2 {
		code, out, stderr := runDLM(t, nil, "elect", store, "elect/env", "node a", "--", "sh", "-c", script)
		if code != 3 {
			t.Fatalf("exit %d, want the command's 3; stderr:\n%s", code, stderr)
		}
		f := strings.Split(strings.TrimSpace(out), "|")
		if len(f) != 5 || f[0] != "elect/env" || f[1] != "node a" || f[3] != "elect/env" || f[4] != f[2] {
			t.Fatalf("the command saw %q", out)
		}
		term, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil || term <= last {
			t.Fatalf("DLM_TERM=%q after term %d", f[2], last)
		}
		last = term
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--", "no-such-command-dlm"}, exitNotFound},
		{[]string{"--", "sh", "-c", "kill -9 $$"}, 128 + 9},
	} {
		if code, _, stderr := runDLM(t, nil, append([]string{"elect", store, "elect/env", "v"}, tc.args...)...); code != tc.want {
			t.Errorf("%q: exit %d, want %d; stderr:\n%s", tc.args, code, tc.want, stderr)
		}
	}
}

// --leader prints who leads once, and --observe each change, in text or
// JSON; nobody leading is "none", and exit 3 for --leader.
func TestElectLeaderAndObserve(t *testing.T) {
	for kind, storeOf := range electStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			store := storeOf(t)
			skipUnlessInspects(t, kind, inspects(t, store))
			name := "elect-leader-" + kind
			code, out, stderr := runDLM(t, nil, "elect", "--leader", store, name)
			if code != exitNoLeader || out != "none\n" {
				t.Fatalf("--leader with nobody leading: exit %d, %q; stderr:\n%s", code, out, stderr)
			}
			code, out, _ = runDLM(t, nil, "elect", "--leader", "--json", store, name)
			if code != exitNoLeader || out != `{"election":"`+name+`","leader":false,"value":"","term":0}`+"\n" {
				t.Fatalf("--leader --json with nobody leading: exit %d, %q", code, out)
			}
			obs := startDLM(t, nil, "elect", "--observe", store, name)
			obs.stdout.expect(t, "none", electWait)
			a := startDLM(t, nil, "elect", store, name, "node a")
			term := termLine(t, a)
			want := fmt.Sprintf(`term=%d value="node a"`, term) // and since=, where the store knows it
			obs.stdout.expect(t, want, electWait)
			code, out, stderr = runDLM(t, nil, "elect", "--leader", store, name)
			if code != 0 || !strings.HasPrefix(out, want) {
				t.Fatalf("--leader: exit %d, %q, want %q...; stderr:\n%s", code, out, want, stderr)
			}
			code, out, _ = runDLM(t, nil, "elect", "--leader", "--json", store, name)
			var j leaderJSON
			if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || !j.Leader || j.Term != term || j.Value != "node a" || j.Election != name {
				t.Fatalf("--leader --json: exit %d, %q (%v)", code, out, err)
			}
			a.cmd.Process.Signal(syscall.SIGTERM)
			a.wait(t, electWait)
			obs.stdout.expect(t, "none", electWait)
			obs.cmd.Process.Signal(syscall.SIGINT)
			if code := obs.wait(t, electWait); code != 0 {
				t.Fatalf("the observer exited %d on SIGINT, want 0; stderr:\n%s", code, obs.stderr)
			}
		})
	}
}

// On a store that cannot read a lock by its name, --observe and --leader
// are usage errors that say so.
func TestElectObserveUnsupported(t *testing.T) {
	stores := maps.Clone(electStores)
	stores["redlock"] = func(t *testing.T) string { return "--store=redlock://" + closedAddr(t) + "," + closedAddr(t) }
	for kind, storeOf := range stores {
		t.Run(kind, func(t *testing.T) {
			store := storeOf(t)
			if inspects(t, store) {
				t.Skipf("the %s store can say who leads", kind)
			}
			for _, mode := range []string{"--observe", "--leader"} {
				code, out, stderr := runDLM(t, nil, "elect", mode, store, "elect-unsupported")
				if code != exitUsage || out != "" {
					t.Errorf("%s: exit %d, want %d; stdout %q", mode, code, exitUsage, out)
				}
				oneErrorLine(t, stderr, "dlm elect: ", "cannot read a lock by its name")
			}
		})
	}
}

// Bad input is a usage error, one line, found before the store is asked
// (the store here is down).
func TestElectUsageErrors(t *testing.T) {
	dead := "--store=dlm://" + closedAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"empty name", []string{"", "v"}, "NAME is empty"},
		{"empty name observed", []string{"--observe", ""}, "NAME is empty"},
		{"name too long", []string{strings.Repeat("n", 513), "v"}, "NAME is 513 bytes, the limit is 512"},
		{"control character", []string{"a\x01b", "v"}, "control character"},
		{"value too long", []string{"e", strings.Repeat("v", 1025)}, "VALUE is 1025 bytes, the limit is 1024"},
		{"no value", []string{"e"}, "want NAME and VALUE"},
		{"flags after the name", []string{"e", "v", "--ttl", "1s", "--", "true"}, "flags go before NAME"},
		{"nothing after --", []string{"e", "v", "--"}, "no command after --"},
		{"observe two", []string{"--observe", "e", "v"}, "want one argument"},
		{"observe and leader", []string{"--observe", "--leader", "e"}, "do not go together"},
		{"json without observe", []string{"--json", "e", "v"}, "--json goes with --observe or --leader"},
		{"ttl too short", []string{"--ttl", "1ms", "e", "v"}, "--ttl 1ms is outside"},
		{"negative grace", []string{"--grace", "-1s", "e", "v", "--", "true"}, "--grace -1s is negative"},
		{"bad wait", []string{"--wait", "-1s", "e", "v"}, "-wait"},
		{"poll too short", []string{"--observe", "--poll-interval", "1ms", "e"}, "--poll-interval 1ms is outside"},
		{"bad store", []string{"--store", "mysql://h", "e", "v"}, "--store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runDLM(t, nil, append([]string{"elect", dead}, tc.args...)...)
			if code != exitUsage || out != "" {
				t.Errorf("exit %d, want %d; stdout %q", code, exitUsage, out)
			}
			oneErrorLine(t, stderr, "dlm elect: ", tc.want)
		})
	}
}

// The leader's line: "none", or term, value (quoted when it would be
// ambiguous) and since, in UTC; in JSON, the documented fields.
func TestElectLeaderLine(t *testing.T) {
	since := time.Date(2026, 11, 26, 3, 30, 0, 5, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		ld         dlm.Leader
		text, json string
	}{
		{dlm.Leader{}, "none", `{"election":"e","leader":false,"value":"","term":0}`},
		{dlm.Leader{Value: "node-a", Term: 42, Since: since}, "term=42 value=node-a since=2026-11-26T02:30:00Z",
			`{"election":"e","leader":true,"value":"node-a","term":42,"since":"2026-11-26T02:30:00.000000005Z"}`},
		{dlm.Leader{Value: "node-a", Term: 42}, "term=42 value=node-a", `{"election":"e","leader":true,"value":"node-a","term":42}`},
		{dlm.Leader{Value: "", Term: 1}, `term=1 value=""`, `{"election":"e","leader":true,"value":"","term":1}`},
		{dlm.Leader{Value: "a b", Term: 1}, `term=1 value="a b"`, `{"election":"e","leader":true,"value":"a b","term":1}`},
		{dlm.Leader{Value: "a=b", Term: 1}, `term=1 value="a=b"`, `{"election":"e","leader":true,"value":"a=b","term":1}`},
		{dlm.Leader{Value: "l1\nterm=9", Term: 1}, `term=1 value="l1\nterm=9"`, `{"election":"e","leader":true,"value":"l1\nterm=9","term":1}`},
		{dlm.Leader{Value: "rlo\u202e", Term: 1}, `term=1 value="rlo\u202e"`, "{\"election\":\"e\",\"leader\":true,\"value\":\"rlo\u202e\",\"term\":1}"},
		{dlm.Leader{Value: "\xff", Term: 1}, `term=1 value="\xff"`, `{"election":"e","leader":true,"value":"\ufffd","term":1}`},
		{dlm.Leader{Value: "hôte:7420", Term: 1}, `term=1 value=hôte:7420`, `{"election":"e","leader":true,"value":"hôte:7420","term":1}`},
	} {
		for _, asJSON := range []bool{false, true} {
			var b strings.Builder
			if err := printLeader(&b, "e", tc.ld, asJSON); err != nil {
				t.Fatal(err)
			}
			want := tc.text
			if asJSON {
				want = tc.json
			}
			if b.String() != want+"\n" {
				t.Errorf("%+v (json %v): %q, want %q", tc.ld, asJSON, b.String(), want+"\n")
			}
		}
	}
}

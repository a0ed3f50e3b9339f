package redislua

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/internal/testenv"
)

// echo answers its first argument, after incrementing a counter key.
var echo = goredis.NewScript(`redis.call('INCR', KEYS[1]) return ARGV[1]`)

// pipelines counts the pipelines a client sends and the commands in them.
type pipelines struct{ sent, cmds, largest atomic.Int64 }

func (p *pipelines) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (p *pipelines) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (p *pipelines) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		p.sent.Add(1)
		p.cmds.Add(int64(len(cmds)))
		for {
			l := p.largest.Load()
			if int64(len(cmds)) <= l || p.largest.CompareAndSwap(l, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

var _ goredis.Hook = (*pipelines)(nil)

func client(t *testing.T) (*goredis.Client, *pipelines) {
	t.Helper()
	srv := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	p := &pipelines{}
	rdb.AddHook(p)
	return rdb, p
}

func TestBatcherAnswersEachCall(t *testing.T) {
	rdb, p := client(t)
	b := NewBatcher(rdb)
	ctx := context.Background()
	const callers, calls = 32, 50
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			for j := range calls {
				want := strconv.Itoa(i) + "/" + strconv.Itoa(j)
				got, err := b.Run(ctx, echo, []string{"count"}, want).Text()
				if err != nil || got != want {
					t.Errorf("call %s answered %q, %v", want, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	n, err := rdb.Get(ctx, "count").Int64()
	if err != nil || n != callers*calls {
		t.Fatalf("the node ran the script %d times (%v), want %d", n, err, callers*calls)
	}
	// Concurrent calls shared pipelines: fewer pipelines than calls. (How
	// many depends on the scheduler; that they are shared does not.)
	if sent := p.sent.Load(); sent >= callers*calls || p.largest.Load() < 2 {
		t.Fatalf("%d calls went in %d pipelines of at most %d, want them shared", callers*calls, sent, p.largest.Load())
	}
}

func TestBatcherLoadsAMissingScript(t *testing.T) {
	rdb, _ := client(t)
	b := NewBatcher(rdb)
	ctx := context.Background()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := b.Run(ctx, echo, []string{"count"}, "x").Text()
	if err != nil || got != "x" {
		t.Fatalf("after SCRIPT FLUSH: %q, %v", got, err)
	}
	// Its hash now works in a pipeline.
	if got, err := b.Run(ctx, echo, []string{"count"}, "y").Text(); err != nil || got != "y" {
		t.Fatalf("second call: %q, %v", got, err)
	}
}

// TestBatcherAbandonedCallIsNotSent holds a pipeline in flight on a node
// that does not answer, queues a call behind it and gives up on the call:
// it must return at once with its context's error, and never reach the
// node.
func TestBatcherAbandonedCallIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	rdb := goredis.NewClient(&goredis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	b := NewBatcher(rdb)

	first := make(chan error, 1)
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	go func() { first <- b.Run(fctx, echo, []string{"k"}, "first").Err() }()
	var conn net.Conn
	select {
	case conn = <-accepted: // the first pipeline is in flight
	case <-time.After(10 * time.Second):
		t.Fatal("the first call did not connect")
	}
	defer conn.Close()
	// The first call owns the batcher once it has connected; queue the
	// second behind it.
	await(t, "the first call to send", func() bool { return b.state() == [2]int{1, 0} })
	sctx, scancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { second <- b.Run(sctx, echo, []string{"k"}, "second").Err() }()
	await(t, "the second call to queue", func() bool { return b.state() == [2]int{1, 1} })
	scancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call = %v, want context.Canceled", err)
	}
	if st := b.state(); st[1] != 0 {
		t.Fatalf("%d calls still queued after the only one gave up", st[1])
	}
	ln.Close()
	conn.Close() // the first pipeline fails; nothing else is sent
	if err := <-first; err == nil {
		t.Fatal("the first call succeeded on a node that closed the connection")
	}
	b.Close()
	if st := b.state(); st != [2]int{0, 0} {
		t.Fatalf("batcher busy %d with %d queued after its last call, want idle", st[0], st[1])
	}
}

// spin runs for ARGV[1] milliseconds of the node's clock, then answers
// ARGV[2].
var spin = goredis.NewScript(`
local function now() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
local stop = now() + tonumber(ARGV[1])
while now() < stop do end
return ARGV[2]`)

// TestBatcherCallerDeadlineBoundsItsCallOnly puts a call with a short
// deadline and one without any in the same pipeline, behind a slow call:
// the pipeline outlasts the first caller's deadline, and the second call
// must still get its answer (it used to fail with the first's i/o timeout).
func TestBatcherCallerDeadlineBoundsItsCallOnly(t *testing.T) {
	rdb, p := client(t)
	b := NewBatcher(rdb)
	defer b.Close()
	for _, sc := range []*goredis.Script{spin, echo} {
		if err := sc.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slow := make(chan error, 1)
	go func() { slow <- b.Run(context.Background(), spin, []string{"k"}, 300, "slow").Err() }()
	await(t, "the slow call to be in flight", func() bool { return b.state() == [2]int{1, 0} })
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	impatient := make(chan error, 1)
	go func() { impatient <- b.Run(short, spin, []string{"k"}, 2500, "impatient").Err() }()
	await(t, "the impatient call to queue", func() bool { return b.state() == [2]int{1, 1} })
	patient := make(chan *goredis.Cmd, 1)
	go func() { patient <- b.Run(context.Background(), echo, []string{"count"}, "patient") }()
	await(t, "the patient call to queue", func() bool { return b.state() == [2]int{1, 2} })
	if err := <-slow; err != nil {
		t.Fatalf("slow call: %v", err)
	}
	if got, err := (<-patient).Text(); err != nil || got != "patient" {
		t.Fatalf("patient call = %q, %v; want its answer: another caller's deadline failed it", got, err)
	}
	if err := <-impatient; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("impatient call = %v, want its own deadline", err)
	}
	if p.largest.Load() < 2 {
		t.Fatalf("the two calls went in pipelines of at most %d", p.largest.Load())
	}
}

// TestBatcherGivenUpCallPrecedesTheNext gives up on a call in flight and
// makes another at once: the node must run the first before the second
// (a release settling an acquisition its caller gave up must not overtake
// it).
func TestBatcherGivenUpCallPrecedesTheNext(t *testing.T) {
	rdb, _ := client(t)
	b := NewBatcher(rdb)
	defer b.Close()
	first := `redis.call('SET', KEYS[1], ARGV[2]) `
	set := goredis.NewScript(`
local function now() local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end
local stop = now() + tonumber(ARGV[1])
while now() < stop do end
` + first + `return 1`)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- b.Run(ctx, set, []string{"k"}, 200, "first").Err() }()
	await(t, "the first call to be in flight", func() bool { return b.state() == [2]int{1, 0} })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("given-up call = %v, want context.Canceled", err)
	}
	if err := b.Run(context.Background(), set, []string{"k"}, 0, "second").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(context.Background(), "k").Result(); err != nil || got != "second" {
		t.Fatalf("k = %q, %v after both calls; want the second call's value", got, err)
	}
}

// state returns whether b is busy (1) and how many calls it queues.
func (b *Batcher) state() [2]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	busy := 0
	if b.busy {
		busy = 1
	}
	return [2]int{busy, len(b.queue)}
}

// await polls cond until it holds, failing the test after 10 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBatcherSendsNothingForAnEndedContext(t *testing.T) {
	rdb, _ := client(t)
	b := NewBatcher(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Run(ctx, echo, []string{"count"}, "x").Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended context = %v, want context.Canceled", err)
	}
	if n, err := rdb.Exists(context.Background(), "count").Result(); err != nil || n != 0 {
		t.Fatalf("the script ran (%d, %v)", n, err)
	}
}

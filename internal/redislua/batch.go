package redislua

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Batcher sends the scripts that concurrent calls run on one node together,
// as pipelines: a call that finds no pipeline in flight sends its own at
// once; the calls that arrive while one is in flight queue, and the first
// of them sends them all in one pipeline when it returns. Under load the
// node then reads many scripts in one read and answers them in one write,
// and the client writes and reads once for them; a call alone costs what a
// plain call costs. No goroutine of its own: the callers take turns.
type Batcher struct {
	rdb goredis.UniversalClient

	mu    sync.Mutex
	queue []*batchCall
	busy  bool // a pipeline is in flight, or its sender is handing over
}

// batchTimeout bounds a pipeline none of whose callers has a deadline, and
// one that a caller sends after giving up on its own call.
const batchTimeout = 10 * time.Second

// batchCall is one script call queued on a Batcher.
type batchCall struct {
	cmd      *goredis.Cmd
	deadline time.Time     // the caller's, if any
	done     chan struct{} // closed once cmd has its answer
	lead     chan struct{} // closed when this call is to send the next pipeline
	led      bool          // lead is closed (under the batcher's mu)
}

// NewBatcher returns a batcher of the calls to rdb.
func NewBatcher(rdb goredis.UniversalClient) *Batcher { return &Batcher{rdb: rdb} }

// Run runs the script sc, by its hash, as goredis.Script.Run does: a node
// that does not know the script (restarted, flushed) gets it in full. The
// command's error is ctx's when ctx ends first.
func (b *Batcher) Run(ctx context.Context, sc *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sc.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := goredis.NewCmd(ctx, cmdArgs...)
	if err := b.do(ctx, cmd); err != nil {
		// A fresh command: a pipeline in flight may still write to cmd.
		failed := goredis.NewCmd(ctx, cmdArgs...)
		failed.SetErr(err)
		return failed
	}
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		return sc.Eval(ctx, b.rdb, keys, args...)
	}
	return cmd
}

// do sends cmd in a pipeline, its own or one that another call sends. It
// returns ctx's error when ctx ends first: cmd then either was never sent
// or is answered to nobody.
func (b *Batcher) do(ctx context.Context, cmd *goredis.Cmd) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: %w", err) // not sent
	}
	b.mu.Lock()
	if !b.busy {
		// Nothing in flight: a plain call, and nothing to allocate.
		b.busy = true
		b.mu.Unlock()
		_ = b.rdb.Process(ctx, cmd)
		b.handOver()
		return nil
	}
	c := &batchCall{cmd: cmd, done: make(chan struct{}), lead: make(chan struct{})}
	c.deadline, _ = ctx.Deadline()
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-c.lead:
		b.send(ctx, c)
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, c); i >= 0 && !c.led {
		b.queue = slices.Delete(b.queue, i, i+1) // never sent
		b.mu.Unlock()
		return fmt.Errorf("redis: %w", ctx.Err())
	}
	led := c.led
	b.mu.Unlock()
	if led {
		// Chosen to send the next pipeline: others wait for it.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		defer cancel()
		b.send(sctx, c)
		return nil
	}
	return fmt.Errorf("redis: %w", ctx.Err()) // in flight: answered to nobody
}

// send sends every queued call in one pipeline, then hands the turn to the
// first call queued meanwhile, if any. The sender's own call is own, and
// ctx its context: when the call goes alone, it goes as a plain call under
// ctx.
func (b *Batcher) send(ctx context.Context, own *batchCall) {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()
	if len(batch) == 1 && batch[0] == own {
		_ = b.rdb.Process(ctx, own.cmd)
		close(own.done)
		b.handOver()
		return
	}
	// The pipeline lasts as long as the most patient of its callers (each
	// call carries its per-node deadline); a caller that gives up earlier
	// stops waiting for it.
	deadline := time.Now().Add(batchTimeout)
	if last := slices.MaxFunc(batch, func(a, b *batchCall) int { return a.deadline.Compare(b.deadline) }); !last.deadline.IsZero() {
		deadline = last.deadline
	}
	pctx, cancel := context.WithDeadline(context.Background(), deadline)
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		_ = pipe.Process(pctx, c.cmd)
	}
	_, _ = pipe.Exec(pctx) // each command keeps its own answer or error
	cancel()
	for _, c := range batch {
		close(c.done)
	}
	b.handOver()
}

// handOver gives the turn to the first call queued, or leaves the batcher
// idle.
func (b *Batcher) handOver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy = false
		return
	}
	next := b.queue[0]
	next.led = true
	close(next.lead)
}

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
// as pipelines: a call that finds nothing in flight is sent at once; the
// calls that arrive while a pipeline is in flight queue, and go together in
// the next one, sent as soon as the one in flight is answered. Under load
// the node then reads many scripts in one read and answers them in one
// write, and the client writes and reads once for them.
//
// A caller's context bounds that caller's wait only: the pipelines are sent
// by the batcher's pump, under a context of their own (at most
// batchTimeout), so one caller's deadline never fails another's command. A
// call whose caller gives up while it is queued is never sent; one given up
// in flight runs to its answer, which nobody reads. Either way the calls a
// caller makes next (a release that settles an acquisition it gave up) are
// sent after it: pipelines go one at a time, in order.
type Batcher struct {
	rdb goredis.UniversalClient

	mu    sync.Mutex
	queue []*batchCall
	busy  bool          // the pump runs
	idle  chan struct{} // closed when the running pump stops
}

// batchTimeout bounds one pipeline.
const batchTimeout = 10 * time.Second

// batchCall is one script call queued on a Batcher.
type batchCall struct {
	cmd  *goredis.Cmd
	done chan struct{} // closed once cmd has its answer
}

// NewBatcher returns a batcher of the calls to rdb.
func NewBatcher(rdb goredis.UniversalClient) *Batcher { return &Batcher{rdb: rdb} }

// Run runs the script sc by its hash; a node that does not know the script
// (restarted, flushed) is sent it (SCRIPT LOAD, which changes no data) and
// runs it again. The command's error is ctx's when ctx ends first.
func (b *Batcher) Run(ctx context.Context, sc *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	cmdArgs := scriptArgs(sc.Hash(), keys, args)
	cmd := b.call(ctx, cmdArgs)
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := sc.Load(ctx, b.rdb).Err(); err != nil {
			return failedCmd(ctx, cmdArgs, err)
		}
		return b.call(ctx, cmdArgs)
	}
	return cmd
}

// scriptArgs returns the arguments of the EVALSHA command of a script.
func scriptArgs(hash string, keys []string, args []any) []any {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", hash, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	return append(cmdArgs, args...)
}

// call sends the command of cmdArgs through the pump and waits for its
// answer or for ctx's end, whichever comes first.
func (b *Batcher) call(ctx context.Context, cmdArgs []any) *goredis.Cmd {
	if err := ctx.Err(); err != nil {
		return failedCmd(ctx, cmdArgs, fmt.Errorf("redis: %w", err)) // not sent
	}
	c := &batchCall{cmd: goredis.NewCmd(ctx, cmdArgs...), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if !b.busy {
		b.busy = true
		b.idle = make(chan struct{})
		go b.pump(b.idle)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, c); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1) // never sent
	}
	b.mu.Unlock()
	// A fresh command: the pipeline in flight may still write to c.cmd.
	return failedCmd(ctx, cmdArgs, fmt.Errorf("redis: %w", ctx.Err()))
}

func failedCmd(ctx context.Context, cmdArgs []any, err error) *goredis.Cmd {
	cmd := goredis.NewCmd(ctx, cmdArgs...)
	cmd.SetErr(err)
	return cmd
}

// pump sends the queued calls, all that queued meanwhile in one pipeline,
// until none is left; then it closes idle.
func (b *Batcher) pump(idle chan struct{}) {
	defer close(idle)
	for {
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.send(batch)
	}
}

// send sends batch, one call as a plain command and several as one
// pipeline, and closes each call's done once the answers are in.
func (b *Batcher) send(batch []*batchCall) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	if len(batch) == 1 {
		_ = b.rdb.Process(ctx, batch[0].cmd)
	} else {
		pipe := b.rdb.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command keeps its own answer or error
	}
	for _, c := range batch {
		close(c.done)
	}
}

// Close waits for the calls in flight to be answered (at most
// batchTimeout). Calls made after it still work.
func (b *Batcher) Close() {
	b.mu.Lock()
	idle, busy := b.idle, b.busy
	b.mu.Unlock()
	if busy {
		<-idle
	}
}

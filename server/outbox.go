package server

import (
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// keepBuffer is the largest queue capacity (messages) an outbox keeps
// between bursts; a larger one is dropped once drained, so that a burst's
// memory does not stay with an idle stream.
const keepBuffer = 256

// messageCost is the memory a queued message is estimated to take: its
// encoded size plus StreamMessageOverhead.
func messageCost(m *dlmpb.SessionResponse) int64 {
	return int64(proto.Size(m)) + StreamMessageOverhead
}

// queueBudget counts the bytes queued in all the outboxes of a server
// against MaxQueuedBytes.
type queueBudget struct {
	limit  int64
	bytes  atomic.Int64
	high   atomic.Int64 // the most bytes ever queued at once
	slowed atomic.Int64 // streams ended for a full queue, theirs or the server's
}

func newQueueBudget(limit int64) *queueBudget { return &queueBudget{limit: limit} }

// reserve takes n bytes from the budget, unless that would pass its limit.
func (b *queueBudget) reserve(n int64) bool {
	for {
		cur := b.bytes.Load()
		if cur+n > b.limit {
			return false
		}
		if b.bytes.CompareAndSwap(cur, cur+n) {
			for h := b.high.Load(); cur+n > h && !b.high.CompareAndSwap(h, cur+n); h = b.high.Load() {
			}
			return true
		}
	}
}

// free returns n bytes to the budget.
func (b *queueBudget) free(n int64) { b.bytes.Add(-n) }

// used returns the bytes queued now; peak the most ever queued at once.
func (b *queueBudget) used() int64 { return b.bytes.Load() }
func (b *queueBudget) peak() int64 { return b.high.Load() }

// outbox queues the messages of one session stream, in the order the FSM
// produced them, for the stream's writer. Pushing never blocks (the FSM's
// observer pushes). An outbox whose queue would pass its limit of messages
// or of bytes (see messageCost), or the server's budget, is ended as a slow
// client's: its messages are dropped, and the client resumes its session
// on a new stream. Queued bytes count until the writer has sent them.
type outbox struct {
	sid      locktable.SessionID
	limit    int   // messages
	maxBytes int64 // bytes, though one message always fits an empty queue
	budget   *queueBudget

	// ka is the newest keepalive awaiting its acknowledgement (see
	// keepalives): it is set and taken without the lock, so that a reader
	// never waits on the queue.
	ka atomic.Pointer[keepaliveAck]
	// over mirrors ended, for readers that must not wait on the lock.
	over atomic.Bool

	mu    sync.Mutex
	msgs  []*dlmpb.SessionResponse
	bytes int64         // the cost of msgs plus that of the messages being sent
	wake  chan struct{} // capacity 1: something was pushed or the outbox ended
	// aborted is closed when the outbox ends without drain: its stream is
	// to end at once, even while a send waits for a client that does not
	// read.
	aborted chan struct{}
	ended   bool
	drain   bool // when ended: send what is queued first
	// onAbort, if set, is called when the outbox ends without drain.
	onAbort func()
	err     error // why it ended; nil for a normal end (closed, expired)
}

func newOutbox(sid locktable.SessionID, limit int, maxBytes int64, budget *queueBudget) *outbox {
	return &outbox{sid: sid, limit: limit, maxBytes: maxBytes, budget: budget, wake: make(chan struct{}, 1), aborted: make(chan struct{})}
}

// push queues messages; it does nothing once the outbox has ended.
func (o *outbox) push(ms ...*dlmpb.SessionResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return
	}
	var cost int64
	for _, m := range ms {
		cost += messageCost(m)
	}
	switch {
	case len(o.msgs)+len(ms) > o.limit:
		o.slowLocked(fmt.Errorf("dlm server: session %d: %d messages queued for the stream, the limit is %d: %w", o.sid, len(o.msgs)+len(ms), o.limit, errSlowClient))
		return
	case o.bytes > 0 && o.bytes+cost > o.maxBytes:
		o.slowLocked(fmt.Errorf("dlm server: session %d: %d bytes queued for the stream, the limit is %d bytes: %w", o.sid, o.bytes+cost, o.maxBytes, errSlowClient))
		return
	case !o.budget.reserve(cost):
		o.slowLocked(fmt.Errorf("dlm server: session %d: %d more bytes would pass the server's limit of %d bytes queued for all streams: %w", o.sid, cost, o.budget.limit, errSlowClient))
		return
	}
	o.bytes += cost
	o.msgs = append(o.msgs, ms...)
	o.signal()
}

// slowLocked ends the outbox of a client too slow for its queue.
func (o *outbox) slowLocked(err error) {
	o.budget.slowed.Add(1)
	o.endLocked(false, err)
}

// end ends the outbox: with drain, the writer still sends what is queued.
// Only the first end counts.
func (o *outbox) end(drain bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked(drain, err)
}

func (o *outbox) endLocked(drain bool, err error) {
	if o.ended {
		return
	}
	o.ended, o.drain, o.err = true, drain, err
	o.over.Store(true)
	if !drain {
		o.dropLocked()
		close(o.aborted)
		if o.onAbort != nil {
			o.onAbort()
		}
	}
	o.signal()
}

// setOnAbort makes f be called once the outbox ends without drain (at
// once if it has): f must be quick and must not call the outbox.
func (o *outbox) setOnAbort(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended && !o.drain {
		f()
		return
	}
	o.onAbort = f
}

// dropLocked drops the queued messages and returns their bytes (and those
// of the messages being sent, which no longer count once ended).
func (o *outbox) dropLocked() {
	o.msgs = nil
	o.budget.free(o.bytes)
	o.bytes = 0
}

// reason returns why the outbox ended (nil for a normal end, or while it
// has not ended).
func (o *outbox) reason() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// isEnded reports whether the outbox has ended; it never waits.
func (o *outbox) isEnded() bool { return o.over.Load() }

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the queued messages (swapping buf in as the new queue) and
// whether the outbox has ended; after an end without drain it returns no
// messages. The messages' bytes count until sent reports them.
func (o *outbox) take(buf []*dlmpb.SessionResponse) (msgs []*dlmpb.SessionResponse, ended bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cap(buf) > keepBuffer {
		buf = nil
	}
	msgs, o.msgs = o.msgs, buf[:0]
	return msgs, o.ended, o.err
}

// sent reports that the writer has sent msgs, taken from the outbox: their
// bytes no longer count.
func (o *outbox) sent(msgs []*dlmpb.SessionResponse) {
	var cost int64
	for _, m := range msgs {
		cost += messageCost(m)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended && !o.drain {
		return // dropped already
	}
	cost = min(cost, o.bytes)
	o.bytes -= cost
	o.budget.free(cost)
}

// close returns the bytes still counted (an end with drain whose writer
// stopped early); call it once the writer is done.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dropLocked()
}

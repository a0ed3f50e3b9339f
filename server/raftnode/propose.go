package raftnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Field numbers of dlmpb.Batch, for assembling entries from pre-encoded
// commands (a Batch is its commands' encodings, each length-prefixed).
const (
	batchCommandsField protowire.Number = 1
	batchStampField    protowire.Number = 2
)

// proposal is one Submit call: its encoded commands and whom to tell the
// outcome.
type proposal struct {
	cmds      [][]byte
	done      func([]fsm.Result, error) // called once, by the waiter, or by Close
	submitted time.Time                 // for the apply latency
	num       uint64                    // its place among the node's proposals, from 1
}

// ObserveApplyLatency makes the node call fn, from its waiter goroutine,
// with the time each proposal took from Submit until its entry was applied
// (failed proposals are not counted). fn must be quick. It lasts until the
// node closes.
func (n *Node) ObserveApplyLatency(fn func(time.Duration)) { n.applyObserver.Store(&fn) }

// proposed is the outcome of a proposal, as Propose receives it.
type proposed struct {
	results []fsm.Result
	err     error
}

// inflight is one Raft entry awaiting commit and the proposals it carries.
type inflight struct {
	future raft.ApplyFuture
	props  []*proposal
	count  int // commands in the entry
}

// Propose appends cmds to the Raft log, in one entry together with other
// concurrent proposals, and returns one Result per command once applied.
// The entry is stamped with this node's clock. Errors: ErrNotLeader (not
// appended), ErrLeadershipLost (outcome unknown), ErrClosed, an encoding
// error, or ctx's error wrapped; once the proposal is sent, a ctx error also
// means the outcome is unknown (retry with the same request ids).
func (n *Node) Propose(ctx context.Context, cmds ...*dlmpb.Command) ([]fsm.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	out := make(chan proposed, 1) // buffered: the node never blocks on it
	err := n.Submit(ctx, func(results []fsm.Result, err error) { out <- proposed{results, err} }, cmds...)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-out:
		return r.results, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("dlm server: propose (outcome unknown): %w", ctx.Err())
	}
}

// Submit hands cmds to the node and returns without waiting for them to be
// applied. Once their outcome is known the node calls done, exactly once:
// with one Result per command once applied, or with the error Propose
// would return (the entry's failure, outcome unknown; or ErrClosed). It
// calls done from its own goroutines, so done must be quick, must not
// block and must not call the node. Proposals submitted one after another
// by one goroutine are applied, and their done called, in that order;
// only at Close may the proposals not yet in an entry be told ErrClosed
// before earlier ones are answered. Submit blocks only while the node's
// pipeline is full (back-pressure), or until ctx ends or the node closes;
// if it returns an error, the commands were not handed over and done is
// never called.
//
// The submitter itself hands the entry to Raft when an in-flight slot is
// free, so that a request on a quiet server crosses no goroutine of the
// node on its way in; while every slot is taken, proposals wait in the
// queue, and the waiter cuts them into the next entry as a slot frees.
func (n *Node) Submit(ctx context.Context, done func([]fsm.Result, error), cmds ...*dlmpb.Command) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlm server: propose: %w", err)
	}
	p := &proposal{cmds: make([][]byte, len(cmds)), done: done, submitted: time.Now()}
	for i, c := range cmds {
		b, err := proto.Marshal(c)
		if err != nil {
			return fmt.Errorf("dlm server: encode command: %w", err)
		}
		p.cmds[i] = b
	}
	q := &n.queue
	q.mu.Lock()
	for !q.closed && q.count >= 4*n.cfg.MaxBatch { // full: back-pressure
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-n.stop:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("dlm server: propose: %w", ctx.Err())
		}
		q.mu.Lock()
	}
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.submitted++
	p.num = q.submitted
	q.pending = append(q.pending, p)
	q.count += len(p.cmds)
	if q.free > 0 {
		n.cut()
	}
	q.mu.Unlock()
	return nil
}

// queue holds the proposals not yet in an entry. Entries are cut from it,
// stamped and handed to Raft in order, under mu, by a submitter or by the
// waiter, whichever finds a free in-flight slot and proposals waiting.
type queue struct {
	mu      sync.Mutex
	pending []*proposal
	count   int  // commands in pending
	free    int  // in-flight slots free: MaxInflight less the entries awaiting commit
	closed  bool // set by Close: no more entries
	// submitted counts the proposals taken, answered those told their
	// outcome (in order); advance, if not nil, is closed when answered
	// grows (see Settle).
	submitted, answered uint64
	advance             chan struct{}
	room                chan struct{} // if not nil, submitters wait for room: closed when pending shrinks
	last                int64         // last stamp: stamps never go back on this node
}

// cut takes the first proposals of the queue, up to about MaxBatch
// commands, as one entry: stamps it, hands it to Raft and to the waiter,
// and takes an in-flight slot. The caller holds n.queue.mu, and a slot is
// free. n.inflight has room for every slot, and Raft's apply channel is
// buffered (BatchApplyCh), so nothing here waits for Raft's work.
func (n *Node) cut() {
	q := &n.queue
	props, cmds := q.pending, 0
	for i, p := range q.pending {
		cmds += len(p.cmds)
		if cmds >= n.cfg.MaxBatch {
			props = q.pending[:i+1]
			break
		}
	}
	if len(props) == len(q.pending) {
		q.pending = nil
	} else {
		q.pending = append(q.pending[:0:0], q.pending[len(props):]...)
	}
	q.count -= cmds
	q.free--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	q.last = max(q.last, time.Now().UnixNano())
	data := encodeBatch(props, cmds, q.last)
	n.inflight <- inflight{future: n.raft.Apply(data, n.cfg.ApplyTimeout), props: props, count: cmds}
}

// closeQueue stops the queue: proposals not yet in an entry are told
// ErrClosed, and the waiter stops once the entries in flight are answered.
func (n *Node) closeQueue() {
	q := &n.queue
	q.mu.Lock()
	pending := q.pending
	q.pending, q.count, q.closed = nil, 0, true
	if len(pending) > 0 {
		q.answer(pending[len(pending)-1].num)
	}
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	close(n.inflight)
	q.mu.Unlock()
	for _, p := range pending {
		p.done(nil, ErrClosed)
	}
}

// Settle waits until every proposal submitted before the call has been
// told its outcome (applied, for those that succeeded): what a read of the
// state made after it returns sees. It does not wait for proposals
// submitted meanwhile. It fails with ErrClosed, or ctx's error wrapped.
func (n *Node) Settle(ctx context.Context) error {
	q := &n.queue
	q.mu.Lock()
	target := q.submitted
	for q.answered < target {
		if q.advance == nil {
			q.advance = make(chan struct{})
		}
		advance := q.advance
		q.mu.Unlock()
		select {
		case <-advance:
		case <-ctx.Done():
			return fmt.Errorf("dlm server: settle: %w", ctx.Err())
		case <-n.raftDown:
			return ErrClosed
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}

// answer records that the proposals up to num have been told their
// outcome. The caller holds n.queue.mu.
func (q *queue) answer(num uint64) {
	if num <= q.answered {
		return
	}
	q.answered = num
	if q.advance != nil {
		close(q.advance)
		q.advance = nil
	}
}

// encodeBatch assembles a dlmpb.Batch from the proposals' encoded commands.
func encodeBatch(props []*proposal, count int, stamp int64) []byte {
	size := 11
	for _, p := range props {
		for _, c := range p.cmds {
			size += len(c) + 6
		}
	}
	b := make([]byte, 0, size)
	for _, p := range props {
		for _, c := range p.cmds {
			b = protowire.AppendTag(b, batchCommandsField, protowire.BytesType)
			b = protowire.AppendBytes(b, c)
		}
	}
	b = protowire.AppendTag(b, batchStampField, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(stamp))
}

// await is the waiter goroutine: it waits for each entry in order, tells
// each proposal its outcome (its slice of the results, or the entry's
// error), frees the entry's slot and cuts the next entry from the
// proposals that waited for it. It stops when the queue closes.
func (n *Node) await() {
	defer n.pipeline.Done()
	for e := range n.inflight {
		results, err := n.entryResults(e.future)
		if err == nil && len(results) != e.count {
			err = fmt.Errorf("dlm server: propose: %d results for %d commands", len(results), e.count)
		}
		applied := time.Now()
		off := 0
		for _, p := range e.props {
			if err != nil {
				p.done(nil, err)
				continue
			}
			p.done(results[off:off+len(p.cmds):off+len(p.cmds)], nil)
			off += len(p.cmds)
		}
		if fn := n.applyObserver.Load(); fn != nil && err == nil {
			for _, p := range e.props {
				(*fn)(applied.Sub(p.submitted))
			}
		}
		q := &n.queue
		q.mu.Lock()
		if len(e.props) > 0 {
			q.answer(e.props[len(e.props)-1].num)
		}
		q.free++
		if !q.closed && len(q.pending) > 0 {
			n.cut()
		}
		q.mu.Unlock()
	}
}

// entryResults waits for an entry and returns its results. An entry Raft
// failed while the node's storage fails wraps ErrStorage.
func (n *Node) entryResults(f raft.ApplyFuture) ([]fsm.Result, error) {
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("dlm server: propose: %w", n.storageErr(raftErr(err)))
	}
	switch r := f.Response().(type) {
	case []fsm.Result:
		return r, nil
	case error:
		return nil, r
	default:
		return nil, fmt.Errorf("dlm server: propose: unexpected FSM response %T", r)
	}
}

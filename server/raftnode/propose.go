package raftnode

import (
	"context"
	"fmt"
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
	done      func([]fsm.Result, error) // called once, by the batcher or the waiter
	submitted time.Time                 // for the apply latency
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
// before earlier ones are answered. Submit blocks only while the node's pipeline is full
// (back-pressure), or until ctx ends or the node closes; if it returns an
// error, the commands were not handed over and done is never called.
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
	select {
	case n.proposals <- p:
		return nil
	case <-n.stop:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("dlm server: propose: %w", ctx.Err())
	}
}

// batch is the batcher goroutine. It takes proposals as they come, so that
// a single submitter (one client stream) is never held up behind the entries
// in flight, and whenever an in-flight slot is free it stamps everything
// taken so far (up to about MaxBatch commands) as one entry and submits it
// to Raft. While 4×MaxBatch commands wait it takes no more, which holds
// submitters back. It closes n.inflight when it stops.
func (n *Node) batch() {
	defer n.pipeline.Done()
	defer close(n.inflight)
	var (
		last    int64 // last stamp: stamps never go back on this node
		pending []*proposal
		count   int // commands in pending
	)
	for {
		proposals, slots := n.proposals, n.slots
		if count >= 4*n.cfg.MaxBatch {
			proposals = nil // full: back-pressure
		}
		if len(pending) == 0 {
			slots = nil // nothing to send
		}
		select {
		case p := <-proposals:
			pending = append(pending, p)
			count += len(p.cmds)
			continue
		case slots <- struct{}{}:
		case <-n.stop:
			for _, p := range pending {
				p.done(nil, ErrClosed)
			}
			return
		}
		// Take whatever else is ready, then cut one entry.
	drain:
		for count < n.cfg.MaxBatch {
			select {
			case p := <-n.proposals:
				pending = append(pending, p)
				count += len(p.cmds)
			default:
				break drain
			}
		}
		props, cmds := pending, 0
		for i, p := range pending {
			cmds += len(p.cmds)
			if cmds >= n.cfg.MaxBatch {
				props = pending[:i+1]
				break
			}
		}
		pending = append([]*proposal(nil), pending[len(props):]...)
		count -= cmds
		last = max(last, time.Now().UnixNano())
		data := encodeBatch(props, cmds, last)
		n.inflight <- inflight{future: n.raft.Apply(data, n.cfg.ApplyTimeout), props: props, count: cmds}
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
// error) and frees the entry's slot.
func (n *Node) await() {
	defer n.pipeline.Done()
	for e := range n.inflight {
		results, err := entryResults(e.future)
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
		<-n.slots
	}
}

// entryResults waits for an entry and returns its results.
func entryResults(f raft.ApplyFuture) ([]fsm.Result, error) {
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("dlm server: propose: %w", raftErr(err))
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

package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Releases that come together go to etcd together: a group commit. A
// release that finds no delete of the store in flight sends its own at
// once, a plain delete, as it would alone; the releases that come while one
// is in flight wait for it to answer, and then go in one transaction of
// deletes (each returning its key as it was), sent by a goroutine of the
// store that sends the next one as long as releases keep coming. A lone
// locker's release costs what it did; under many lockers, one call and one
// Raft entry carry many releases.

// maxDeletes is the most deletes in one transaction. etcd refuses a
// transaction of more operations than its --max-txn-ops (128 by default);
// one it refuses goes out as deletes one by one.
const maxDeletes = 64

// deletes is the store's releases in flight and waiting.
type deletes struct {
	mu      sync.Mutex
	busy    bool        // a delete or a transaction of deletes is in flight
	pending []*deletion // waiting for the next transaction
}

// deletion is a release waiting to be sent with others.
type deletion struct {
	key  string
	done chan struct{}    // closed once prev and err are set
	prev *mvccpb.KeyValue // the key as it was; nil if it did not exist
	err  error
}

// deleteKey deletes key and returns it as it was (nil if it did not exist).
// It returns when ctx ends while it waits for other deletes, and the delete
// may still be sent: the caller treats that as any call without an answer.
func (s *Store) deleteKey(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	b := &s.deletes
	b.mu.Lock()
	if b.busy {
		d := &deletion{key: key, done: make(chan struct{})}
		b.pending = append(b.pending, d)
		b.mu.Unlock()
		select {
		case <-d.done:
			return d.prev, d.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.busy = true
	b.mu.Unlock()
	d := deletion{key: key}
	s.deleteAll(ctx, []*deletion{&d})
	s.sendPending()
	return d.prev, d.err
}

// sendPending starts the goroutine that sends the deletes that came while
// one was in flight, or marks none in flight if none came.
func (s *Store) sendPending() {
	b := &s.deletes
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		s.drain() // Close waits for no goroutine any more: finish here
		return
	}
	go func() {
		defer s.wg.Done()
		s.drain()
	}()
}

// drain sends the pending deletes, transaction after transaction, until
// none is left.
func (s *Store) drain() {
	for s.sendBatch() {
	}
}

// sendBatch sends the next transaction of pending deletes, and reports
// whether there was one; when there was none, no delete is in flight any
// more.
func (s *Store) sendBatch() bool {
	b := &s.deletes
	b.mu.Lock()
	batch := b.next()
	if len(batch) == 0 {
		b.busy = false
	}
	b.mu.Unlock()
	if len(batch) == 0 {
		return false
	}
	s.deleteAll(s.ctx, batch)
	for _, d := range batch {
		close(d.done)
	}
	return true
}

// next takes up to maxDeletes pending deletes of distinct keys (a second
// delete of a key waits for the next transaction, which etcd requires).
func (b *deletes) next() []*deletion {
	n := min(len(b.pending), maxDeletes)
	batch := make([]*deletion, 0, n)
	var later []*deletion
	for _, d := range b.pending {
		if len(batch) == maxDeletes || holds(batch, d.key) {
			later = append(later, d)
			continue
		}
		batch = append(batch, d)
	}
	b.pending = later
	return batch
}

// holds reports whether batch has a delete of key.
func holds(batch []*deletion, key string) bool {
	for _, d := range batch {
		if d.key == key {
			return true
		}
	}
	return false
}

// deleteAll sends batch: one delete alone, or a transaction of deletes,
// and sets each deletion's outcome.
func (s *Store) deleteAll(ctx context.Context, batch []*deletion) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	if len(batch) == 1 {
		resp, err := s.kv.deletePrev(cctx, batch[0].key)
		if batch[0].err = err; err == nil {
			batch[0].prev = first(resp.PrevKvs)
		}
		return
	}
	ops := make([]*pb.RequestOp, len(batch))
	for i, d := range batch {
		ops[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{
			Key: []byte(d.key), PrevKv: true}}}
	}
	resp, err := s.kv.txn(cctx, &pb.TxnRequest{Success: ops})
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		for _, d := range batch { // a server whose --max-txn-ops is below maxDeletes
			s.deleteAll(ctx, []*deletion{d})
		}
	case err == nil && len(resp.Responses) != len(batch):
		err = fmt.Errorf("etcd answered %d operations for %d deletes", len(resp.Responses), len(batch))
		fallthrough
	case err != nil:
		for _, d := range batch {
			d.err = err
		}
	default:
		for i, d := range batch {
			d.prev = first(resp.Responses[i].GetResponseDeleteRange().GetPrevKvs())
		}
	}
}

// first returns kvs[0], or nil.
func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

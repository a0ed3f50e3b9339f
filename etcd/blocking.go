package etcd

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Featurer = (*Store)(nil)

// Features returns driver.FeatureBlocking.
func (s *Store) Features() driver.Feature { return driver.FeatureBlocking }

// granted returns the grant of req's ticket t, with its Blocking channel.
// behind is the resource's queue as read at revision rev, when that read
// saw every key created after t's; otherwise rev is 0. A conflicting
// request among them closes the channel at once; otherwise the grant's
// WatchBlocking starts the watch that closes it (see watchBlocking), when
// the holder first asks for the channel: a watch costs etcd and the client
// a stream's create and cancel, which a holder that never looks should not
// pay for.
func (s *Store) granted(req driver.Request, t *ticket, behind []*mvccpb.KeyValue, rev int64) driver.Grant {
	g := t.grant()
	blocking := make(chan struct{})
	g.Blocking = blocking
	switch {
	case req.Mode == driver.NL:
		return g // conflicts with nothing: never closed
	case rev > 0 && conflictBehind(behind, t, req.Mode):
		close(blocking)
		return g
	}
	g.WatchBlocking = func() { s.watchBlocking(req, t, rev, blocking) }
	return g
}

// watchBlocking starts the watch of a grant's Blocking channel, unless the
// grant was released already. The watch runs in a goroutine of its own, so
// the caller does not wait for it, and ends at Release (t.stop), with t's
// key, or with the store (Close) or the client.
func (s *Store) watchBlocking(req driver.Request, t *ticket, rev int64, blocking chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.released || t.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	t.stop = cancel
	go func() {
		defer cancel()
		if s.watchBehind(ctx, s.dir(req.Resource), t, req.Mode, rev) {
			close(blocking)
		}
	}()
}

// watchBehind watches the queue of t's resource, under dir, and reports
// true when a request whose mode conflicts with mode is created behind t.
// It reports false when t's key is deleted (released, expired or revoked),
// when ctx ends (Release, or the client closed), or when the queue can be
// neither watched nor read (each within the request timeout). rev is the
// revision up to which the keys behind t are known (0: none).
//
// The watch starts at the current revision, where etcd serves it from its
// stream of new events; one read of the current keys, once the watch is
// open, covers what was created since rev (see behindAt). (A watch that
// starts in the past is served instead by etcd's catch-up loop, which
// rescans its history every 100 ms for each such watcher: with many holders
// that costs the server more than the read.)
func (s *Store) watchBehind(ctx context.Context, dir string, t *ticket, mode driver.Mode, rev int64) bool {
	for ctx.Err() == nil {
		blocked, again := s.watchFrom(ctx, dir, t, mode, rev)
		if !again {
			return blocked
		}
		rev = 0
	}
	return false
}

// conflictBehind reports whether any of kvs was created after t's key and
// asks for a mode that conflicts with mode.
func conflictBehind(kvs []*mvccpb.KeyValue, t *ticket, mode driver.Mode) bool {
	for _, kv := range kvs {
		if kv.CreateRevision > t.rev && !mode.Compatible(modeOf(kv)) {
			return true
		}
	}
	return false
}

// watchFrom is one watch of watchBehind. It reports whether a conflicting
// request was created behind t, and whether to watch again (etcd compacted
// the watch's revision away).
func (s *Store) watchFrom(ctx context.Context, dir string, t *ticket, mode driver.Mode, rev int64) (blocked, again bool) {
	wch, stop, _ := s.watch(ctx, dir, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	defer stop()
	first, ok := <-wch
	if !ok || first.Err() != nil || !first.Created {
		return false, false
	}
	if start := first.Header.Revision; start > rev {
		if ctx.Err() != nil {
			return false, false // released while the watch opened
		}
		resp, err := s.behindAt(dir, t, start)
		switch {
		case err != nil:
			return false, false
		case !t.queued(resp.Kvs):
			return false, false // released or expired already
		case conflictBehind(resp.Kvs, t, mode):
			return true, false
		}
	}
	for wr := range wch {
		if wr.CompactRevision != 0 {
			return false, true
		}
		if wr.Err() != nil {
			return false, false
		}
		for _, ev := range wr.Events {
			switch {
			case ev.Type == mvccpb.DELETE && string(ev.Kv.Key) == t.key:
				return false, false
			case ev.IsCreate() && conflictBehind([]*mvccpb.KeyValue{ev.Kv}, t, mode):
				return true, false
			}
		}
	}
	return false, false
}

// behindAt reads the keys under dir created since t's, now, for a watch
// that started at revision rev: a key created before rev is either still
// there or gone, and a request that is gone blocks nobody, so the current
// keys are what the holder needs. (A read at revision rev instead, a past
// one, cost etcd 3.4 more with every revision of its history: the store's
// throughput under 64 lockers fell run after run until a compaction.) The
// read is served serializably first, by the member alone, without the round
// through Raft that a linearizable read costs etcd, and made again,
// linearizably, if that member has not applied rev yet or fails. It runs on
// the store's context, not the watch's, so that a Release during the read
// does not cancel it (etcd's client logs every cancelled call as a
// warning); the caller looks at its own context after.
func (s *Store) behindAt(dir string, t *ticket, rev int64) (*clientv3.GetResponse, error) {
	cctx, cancel := s.call(s.ctx)
	defer cancel()
	opts := queueOps(clientv3.WithMinCreateRev(t.rev))
	resp, err := s.cli.Get(cctx, dir, append(opts, clientv3.WithSerializable())...)
	if (err != nil && cctx.Err() == nil) || (err == nil && resp.Header.Revision < rev) {
		resp, err = s.cli.Get(cctx, dir, opts...)
	}
	return resp, err
}

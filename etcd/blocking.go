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

// granted returns the grant of req's ticket t, with its Blocking channel,
// and starts the watch that closes it. behind is the resource's queue as
// read at revision rev, when that read saw every key created after t's;
// otherwise rev is 0 and the watch reads them first. The watch runs in a
// goroutine of its own, so the grant does not wait for it, and ends at
// Release (t.stop), with t's key, or with the store (Close) or the client.
func (s *Store) granted(req driver.Request, t *ticket, behind []*mvccpb.KeyValue, rev int64) driver.Grant {
	t.lost = make(chan struct{})
	s.hold(t)
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
	ctx, cancel := context.WithCancel(s.ctx)
	t.stop = cancel
	go func() {
		defer cancel()
		if s.watchBehind(ctx, s.dir(req.Resource), t, req.Mode, rev) {
			close(blocking)
		}
	}()
	return g
}

// watchBehind watches the queue of t's resource, under dir, from revision
// rev+1, and reports true when a request whose mode conflicts with mode is
// created behind t. It reports false when t's key is deleted (released,
// expired or revoked), when ctx ends (Release, or the client closed), or
// when the queue can be neither watched nor read (each within the request
// timeout). With rev 0, and after a compaction, it first reads the keys
// created since t's, and watches from the read's revision.
func (s *Store) watchBehind(ctx context.Context, dir string, t *ticket, mode driver.Mode, rev int64) bool {
	for {
		if rev == 0 {
			cctx, cancel := s.call(ctx)
			resp, err := s.cli.Get(cctx, dir, queueOps(clientv3.WithMinCreateRev(t.rev))...)
			cancel()
			switch {
			case err != nil:
				return false
			case !t.queued(resp.Kvs):
				return false // released or expired already
			case conflictBehind(resp.Kvs, t, mode):
				return true
			}
			rev = resp.Header.Revision
		}
		blocked, compacted := s.watchFrom(ctx, dir, t, mode, rev+1)
		if !compacted || ctx.Err() != nil {
			return blocked
		}
		rev = 0 // read the queue again, at a revision etcd still has
	}
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

// watchFrom is one watch of watchBehind, from revision rev. It reports
// whether a conflicting request was created behind t, and whether the watch
// ended because etcd compacted rev away.
func (s *Store) watchFrom(ctx context.Context, dir string, t *ticket, mode driver.Mode, rev int64) (blocked, compacted bool) {
	if ctx.Err() != nil {
		return false, false
	}
	wch, stop, _ := s.watch(ctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	defer stop()
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

package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Watcher = (*Store)(nil)

// Watch returns a channel that receives a value after each change to the
// queue of the resource named exactly resource: a request queued, or gone
// (released, expired, given up), which may grant the next, or a holder's
// metadata relabelled. It is one etcd
// watch on the resource's directory (a name's '/' is escaped in keys, so
// the directory of "a" never holds the keys of "a/b" or "ab"), multiplexed
// on the client's watch stream; etcd pushes every change, nothing polls.
//
// Watch returns once etcd has created the watch, at its current revision,
// so every change made after Watch returns is signalled; creating it is
// bounded by the request timeout. Each batch of events etcd sends gives one
// signal, and signals coalesce in a channel of one. The channel is closed
// when ctx ends, when the member the client talks to loses its leader
// (clientv3.WithRequireLeader: a partitioned member would otherwise stay
// silent), or when the watch fails otherwise (it was compacted, the client
// was closed). While no member can be reached at all, clientv3 keeps the
// watch and resumes it where it left off once one can, so the channel stays
// open and no change is missed (unless etcd compacted it away meanwhile:
// then the channel closes). The watch stops with its channel.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if resource == "" {
		return nil, fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcd watch: %w", err)
	}
	wch, stop, late := s.watch(clientv3.WithRequireLeader(ctx), s.dir(resource), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The created notice comes first; a watch that could not be made
	// comes as a closed channel or an error instead.
	wr, ok := <-wch
	if !ok || wr.Err() != nil || !wr.Created || ctx.Err() != nil {
		stop()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("etcd watch: %w", ctx.Err())
		case late:
			return nil, fmt.Errorf("%w: etcd watch: not created within %s", driver.ErrUnavailable, s.timeout)
		}
		return nil, fmt.Errorf("%w: etcd watch: %v", driver.ErrUnavailable, wr.Err())
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer stop()
		for wr := range wch {
			if wr.Err() != nil || wr.Canceled {
				return
			}
			if len(wr.Events) > 0 {
				select {
				case out <- struct{}{}:
				default: // a signal is pending already
				}
			}
		}
	}()
	return out, nil
}

// watch starts an etcd watch of key, which ends when ctx ends or stop is
// called. Its creation is bounded by the request timeout: a watch that etcd
// has not created by then comes as a closed channel, with late true.
//
// When the context of a clientv3 Watch call ends before the call has handed
// its request to the client's watch stream, the client keeps that stream,
// with no watch on it, until the next watch on it ends or the client
// closes. So the end of ctx ends the watch only once the call has returned
// (at most the request timeout).
func (s *Store) watch(ctx context.Context, key string, opts ...clientv3.OpOption) (wch clientv3.WatchChan, stop func(), late bool) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bound := time.AfterFunc(s.timeout, cancel)
	returned := make(chan struct{})
	unhook := context.AfterFunc(ctx, func() {
		select {
		case <-returned:
			cancel()
		case <-wctx.Done(): // the bound passed
		}
	})
	wch = s.cli.Watch(wctx, key, opts...)
	close(returned)
	late = !bound.Stop()
	return wch, func() { unhook(); cancel() }, late
}

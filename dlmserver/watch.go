package dlmserver

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

var _ driver.Watcher = (*Store)(nil)

// Watch returns a channel that receives a value after each change of the
// resource named exactly resource: a grant, a release, a request queued,
// cancelled or timed out, a conversion, a relabel, the end of a session
// holding or awaiting it. The leader pushes them as it applies them (a
// Watch stream on the store's connection; nothing polls), including the
// expiry of a session whose client died, so no signal comes at an
// interval. Signals coalesce: the channel holds one value, and a change
// while one waits adds none; read the resource again with Inspect. Watch
// returns once the server has registered the watch, so that every change
// applied after it returns is signalled.
//
// The channel is closed when ctx ends, when the store is closed, and when
// the stream breaks: the server stops leading (a new leader is elected),
// dies or cannot be reached. Watch again then: the store's session moves
// to the new leader by itself, and a Watch made meanwhile fails with
// driver.ErrUnavailable. A watch needs the list permission on the
// resource. A server bounds the watches open on it and those of one
// identity (4096 and 512 by default): past them Watch fails with ErrLimit.
// Each watch costs a goroutine of the store until it ends.
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, error) {
	if err := driver.CheckName(resource); err != nil || resource == "" {
		return nil, fmt.Errorf("%w: resource name %q", driver.ErrInvalid, resource)
	}
	s.mu.Lock()
	if s.st.closing {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the store is closed", driver.ErrUnavailable)
	}
	s.wg.Add(1) // before Close waits: it marks the store closing first
	s.mu.Unlock()

	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel) // the store's Close ends it
	end := func() {
		stop()
		cancel()
		s.wg.Done()
	}
	stream, err := s.rpc().Watch(wctx, &dlmpb.WatchRequest{Resource: resource})
	if err == nil {
		_, err = stream.Recv() // the watch is registered
	}
	if err != nil {
		end()
		return nil, s.rpcError(ctx, "watch", err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		defer end()
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default: // one waits: it covers this change too
			}
		}
	}()
	return ch, nil
}

package memory

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

// watch is one Watch call: its channel, and the stop of the callback that
// ends it with its context.
type watch struct {
	ch   chan struct{}
	stop func() bool
}

// Watch returns a channel that receives a value after each change of
// resource: a grant, a release, an expiry, a conversion, a request queued,
// cancelled or timed out, a blocking notice, a Relabel. The store pushes
// them as the changes are made (no polling); the channel holds one value,
// so a slow reader gets several changes as one and never holds the store
// back. The channel is closed when ctx ends or the store is closed.
//
// The store keeps at most WithMaxWatches watches at once (ErrUnavailable
// beyond); a resource name is bounded as for locks (ErrInvalid).
func (s *Store) Watch(ctx context.Context, resource string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	if limit := s.tab.Limits().MaxNameLen; resource == "" || len(resource) > limit {
		return nil, fmt.Errorf("%w: resource name of %d bytes (want 1 to %d)", driver.ErrInvalid, len(resource), limit)
	}
	if s.nWatches >= s.maxWatch {
		return nil, fmt.Errorf("%w: %d watches, the limit", driver.ErrUnavailable, s.nWatches)
	}
	w := &watch{ch: make(chan struct{}, 1)}
	set := s.watches[resource]
	if set == nil {
		set = make(map[*watch]struct{})
		s.watches[resource] = set
	}
	set[w] = struct{}{}
	s.nWatches++
	w.stop = context.AfterFunc(ctx, func() { s.unwatch(resource, w) })
	return w.ch, nil
}

// unwatch ends w, a watch of resource, unless Close already did.
func (s *Store) unwatch(resource string, w *watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.watches[resource]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(s.watches, resource)
	}
	s.nWatches--
	close(w.ch)
}

// signal tells the watches of resource that it changed, without waiting
// for any of them.
func (s *Store) signal(resource string) {
	if s.nWatches == 0 {
		return
	}
	for w := range s.watches[resource] {
		select {
		case w.ch <- struct{}{}:
		default: // a signal is already pending: this change joins it
		}
	}
}

// closeWatches ends every watch, for Close.
func (s *Store) closeWatches() {
	for _, set := range s.watches {
		for w := range set {
			w.stop()
			close(w.ch)
		}
	}
	clear(s.watches)
	s.nWatches = 0
}

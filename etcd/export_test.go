package etcd

import (
	"context"

	"github.com/dlmhq/dlm/driver"
)

// WatchBehind runs the watch of g's Blocking channel from revision rev+1
// (with rev 0: from a read of the queue), on the test's goroutine, and
// reports whether it saw a conflicting request behind g.
func WatchBehind(ctx context.Context, s *Store, req driver.Request, g driver.Grant, rev int64) bool {
	return s.watchBehind(ctx, s.dir(req.Resource), g.Handle.(*ticket), req.Mode, rev)
}

// Direct reports whether s sends the calls of a cycle straight to etcd's
// KV service rather than through its client's KV.
func Direct(s *Store) bool { return s.kv.direct != nil }

// PendingDeletes returns how many releases wait for the delete in flight.
func PendingDeletes(s *Store) int {
	s.deletes.mu.Lock()
	defer s.deletes.mu.Unlock()
	return len(s.deletes.pending)
}

// DeleteInFlight reports whether a delete of s is in flight.
func DeleteInFlight(s *Store) bool {
	s.deletes.mu.Lock()
	defer s.deletes.mu.Unlock()
	return s.deletes.busy
}

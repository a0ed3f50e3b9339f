package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

var _ driver.Lister = (*Store)(nil)

// List returns the resources whose name starts with prefix that have a
// holder or a waiter, sorted by name, at most limit of them, as the lock
// table holds them at one moment.
//
// Holders are in grant order, with their owner id, mode (zero for a
// semaphore), permits (semaphores), token, TTL left, and when they were
// granted; a holder that is converting is also listed among the waiters.
// Waiters are in the order they will be served: conversions first (with
// Conversion set and the mode they asked for), then new requests, each
// with when it was queued. Capacity is the number of permits of a
// semaphore. Metadata is the request's. Session is the Group of a grouped
// acquisition, and empty for the others.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	now := s.now().Now
	infos := s.tab.ResourcesWithPrefix(prefix, "", limit)
	out := make([]driver.ResourceInfo, len(infos))
	for i, r := range infos {
		out[i] = s.resourceInfo(r, now)
	}
	return out, nil
}

// resourceInfo describes a resource of the table, as List documents, at
// table time now.
func (s *Store) resourceInfo(r locktable.ResourceInfo, now int64) driver.ResourceInfo {
	sem := r.Kind == locktable.KindSemaphore
	ri := driver.ResourceInfo{Resource: r.Name}
	if sem {
		ri.Capacity = int(r.Capacity)
	}
	for _, l := range r.Holders {
		h := driver.HolderInfo{Mode: l.Mode, Token: l.Token, Since: s.at(l.GrantedAt)}
		if sem {
			h.Permits = int(l.Permits)
		}
		if e := s.byLock[l.ID]; e != nil {
			h.Owner, h.Metadata, h.Session = e.owner, e.meta, e.groupKey()
			if e.granted {
				h.TTL = time.Duration(max(e.expires-now, 0))
			}
		}
		ri.Holders = append(ri.Holders, h)
	}
	for _, q := range [][]locktable.LockInfo{r.Converting, r.Waiting} {
		for _, l := range q {
			w := driver.WaiterInfo{
				Mode:       l.Requested,
				Conversion: l.State == locktable.LockConverting,
				Since:      s.at(l.QueuedAt),
			}
			if sem {
				w.Permits = int(l.Permits)
			}
			if e := s.byLock[l.ID]; e != nil {
				w.Owner, w.Metadata, w.Session = e.owner, e.meta, e.groupKey()
			}
			ri.Waiters = append(ri.Waiters, w)
		}
	}
	return ri
}

// groupKey returns the Group of a grouped acquisition, else "".
func (e *entry) groupKey() string {
	if e.group == nil {
		return ""
	}
	return e.group.key
}

// at returns the wall-clock time of a table time, or the zero time for 0.
func (s *Store) at(t int64) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return s.epoch.Add(time.Duration(t - 1)).Round(0)
}

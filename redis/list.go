package redis

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Lister = (*Store)(nil)

// minListBatch is the fewest resources read in one pipeline of a listing.
const minListBatch = 16

// List returns the resources whose name starts with prefix that have a
// holder or a live waiter, sorted by name, at most limit of them.
//
// It first walks the whole keyspace with SCAN and a MATCH pattern (never
// KEYS), on every master of a Cluster, collecting the names of the
// resources that have a lock key or a queue key; then it sorts the names
// and reads the first ones, pipelined, until it has limit resources that
// still have a holder or a waiter. So a listing costs one pass over the
// keyspace whatever the limit, and keeps the matching names in memory;
// only the resources returned (and those found gone meanwhile) are read.
// Each resource is read atomically by one script, but different resources
// at different moments.
//
// A holder shows its owner id, mode EX, token (the resource's token
// counter, which is the holder's token; 0 if the counter key expired while
// the lock was held, after the fence retention), TTL left (the lock key's
// PTTL), metadata, and when it was granted as Inspect reads it from the
// token.
// Waiters show their owner id and mode EX, first in line first; a waiter
// whose place lapsed (it stopped refreshing it) is left out. The store
// keeps no metadata for waiters.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	names, err := redislua.ScanNames(ctx, s.rdb, s.prefix, prefix, 0)
	if err != nil {
		return nil, s.fail(ctx, "list", err)
	}
	var out []driver.ResourceInfo
	for len(names) > 0 && len(out) < limit {
		n := min(len(names), max(limit-len(out), minListBatch))
		rs, err := redislua.ReadResources(ctx, s.rdb, redislua.Dated, s.prefix, names[:n], 0)
		if err != nil {
			return nil, s.fail(ctx, "list", err)
		}
		names = names[n:]
		for _, r := range rs {
			if r.Empty() {
				continue
			}
			out = append(out, resourceInfo(r))
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// resourceInfo describes what one node holds of a resource.
func resourceInfo(r redislua.Resource) driver.ResourceInfo {
	info := driver.ResourceInfo{Resource: r.Name}
	if r.Owner != "" {
		info.Holders = []driver.HolderInfo{{
			Owner: r.Owner, Mode: driver.EX, Token: r.Token, TTL: r.TTL, Since: r.Since, Metadata: r.Metadata,
		}}
	}
	for _, w := range r.Waiters {
		info.Waiters = append(info.Waiters, driver.WaiterInfo{Owner: w, Mode: driver.EX})
	}
	return info
}

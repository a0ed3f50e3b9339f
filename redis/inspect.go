package redis

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Inspector = (*Store)(nil)

// Inspect returns the resource named exactly resource as it stands, read
// atomically by one script call (the one List reads each resource with):
// the holder, if any, with its owner id, mode EX, metadata, token, TTL
// left and Since, and the live waiters, first in line first, with their
// owner ids and mode EX. Since is the grant's time as the lock's value
// records it: the clock of the client whose call granted the lock (the
// acquirer's, or for a lock a release handed to a waiter, the releaser's);
// zero for a lock whose value has none (granted by dlm 0.1). A free
// resource has no holder and no waiters.
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if s.bad != nil {
		return driver.ResourceInfo{}, s.bad
	}
	if resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: empty resource name", driver.ErrInvalid)
	}
	r, err := redislua.ReadOne(ctx, s.rdb, redislua.Dated, s.prefix, resource, 0)
	if err != nil {
		return driver.ResourceInfo{}, s.fail(ctx, "inspect", err)
	}
	return resourceInfo(r), nil
}

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
// owner ids and mode EX. Since is the Redis server's clock at the grant,
// read from the token (which is that clock in microseconds, unless the
// clock stepped back or grants came faster than one a microsecond: Since is
// then later than the grant, by at most the step); it is zero when the
// token does not read as a past time of the server's clock, such as after
// the token counter expired (the fence retention). A free resource has no
// holder and no waiters.
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if s.bad != nil {
		return driver.ResourceInfo{}, s.bad
	}
	if resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: empty resource name", driver.ErrInvalid)
	}
	r, err := redislua.ReadOne(ctx, s.rdb, s.prefix, resource, 0)
	if err != nil {
		return driver.ResourceInfo{}, s.fail(ctx, "inspect", err)
	}
	return resourceInfo(r), nil
}

package etcd

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Inspector = (*Store)(nil)

// Inspect returns the resource named exactly resource, from one range read
// of its queue (every key under its directory, at one revision).
//
// Holders and waiters are computed as List computes them: holders are the
// requests that no request created before them conflicts with, with their
// owner id, mode, metadata and token (the key's create revision); waiters
// are the others, in arrival order. Inspect makes no lease lookups, so TTLs
// are zero, and etcd does not record when a key was created, so Since is
// zero too. A resource with no key has no holders and no waiters.
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if s.bad != nil {
		return driver.ResourceInfo{}, s.bad
	}
	if resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.dir(resource), queueOps()...)
	if err != nil {
		return driver.ResourceInfo{}, s.fail(ctx, "inspect", err)
	}
	info, _ := s.resourceInfo(resource, resp.Kvs)
	return info, nil
}

package memory

import (
	"context"

	"github.com/dlmhq/dlm/driver"
)

// Inspect returns the resource named exactly resource as the lock table
// holds it, described as in List: holders with their owner, metadata,
// token, grant time and TTL left, and waiters in the order they will be
// served. A resource without holders or waiters is returned with its name
// only.
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if err := ctx.Err(); err != nil {
		return driver.ResourceInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return driver.ResourceInfo{}, err
	}
	r, ok := s.tab.Resource(resource)
	if !ok {
		return driver.ResourceInfo{Resource: resource}, nil
	}
	return s.resourceInfo(r, s.now().Now), nil
}

package dlmserver

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Inspector = (*Store)(nil)

// Inspect returns the resource named exactly resource, as List shows it
// (holders in grant order with their metadata, token and grant time;
// waiters in the order they will be served), or a ResourceInfo with only
// its name if the resource is free. It is one List call on the store's
// connection for that one name, which the server looks up (it does not
// scan the table): served by the server the store uses, the leader, and
// read from its state once the requests it took before are applied. A
// server that is not the leader (while the store moves to a new leader)
// answers from its own state, which may lag the leader's. A resource with
// more locks than a page holds takes several calls, which are not one
// snapshot (see List).
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if err := driver.CheckName(resource); err != nil || resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: resource name %q", driver.ErrInvalid, resource)
	}
	infos, err := s.list(ctx, resource, 1, true)
	if err != nil {
		return driver.ResourceInfo{}, err
	}
	for _, r := range infos {
		if r.Resource == resource {
			return r, nil
		}
	}
	return driver.ResourceInfo{Resource: resource}, nil
}

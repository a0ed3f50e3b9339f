package redis

import (
	"context"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/redislua"
)

var _ driver.Relabeler = (*Store)(nil)

// Relabel sets the metadata of the lock to metadata, in place and keeping
// its TTL, if req.Owner holds it; otherwise it returns driver.ErrNotHeld.
// It does not notify the resource's watchers (see Notify).
func (s *Store) Relabel(ctx context.Context, req driver.Request, _ driver.Grant, metadata string) error {
	if s.bad != nil {
		return s.bad
	}
	n, err := s.batch.Run(ctx, redislua.Relabel, []string{s.lockKey(req.Resource)}, req.Owner, metadata).Int64()
	if err != nil {
		return s.fail(ctx, "relabel", err)
	}
	return notHeld(n, req.Resource)
}

package memory

import (
	"context"

	"github.com/dlmhq/dlm/driver"
)

// Relabel sets the metadata of the lock held by req.Owner, which List and
// Inspect show from then on, and signals the resource's watches. A lock no
// longer held (released, expired) is ErrNotHeld.
func (s *Store) Relabel(ctx context.Context, req driver.Request, _ driver.Grant, metadata string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.holder(req)
	if err != nil {
		return err
	}
	e.meta = metadata
	s.signal(e.res)
	return nil
}

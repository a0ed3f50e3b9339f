package dlmserver

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

var _ driver.Relabeler = (*Store)(nil)

// Relabel sets the metadata of the lock granted as g, in place: the lock
// keeps its grant, mode and token. The server applies it through its log
// (the metadata is replicated, and kept in snapshots) and answers once it
// is applied, so that Inspect and List show the new metadata when Relabel
// returns. Metadata is bounded as at acquisition (1 KiB: longer is
// driver.ErrInvalid), and needs the lock permission on the resource, as
// the lock did. A lock that is not held (released, lost) is
// driver.ErrNotHeld. If ctx ends before the answer, the error wraps
// driver.ErrUnavailable and ctx's error, and the relabel may yet be
// applied. A server older than the relabel request does not answer it:
// the call then ends with ctx.
func (s *Store) Relabel(ctx context.Context, req driver.Request, g driver.Grant, metadata string) error {
	s.mu.Lock()
	ls := s.held(req, g)
	if ls == nil || ls.gone || !ls.granted {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, req.Resource)
	}
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	c := s.sendLocked(callRelabel, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Relabel{Relabel: &dlmpb.RelabelRequest{
			Id: s.reqID(seq), LockId: ls.id, Metadata: []byte(metadata),
		}}}
	})
	s.mu.Unlock()
	return s.await(ctx, c)
}

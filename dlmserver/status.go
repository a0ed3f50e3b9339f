package dlmserver

import (
	"context"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// Status asks the server the store is connected to for its status: its
// node id, whether it is the Raft leader and the leader's address, the
// index of the last log entry it applied, the last fencing token issued,
// the numbers of sessions, resources, locks and pending requests in its
// state, and its clock. A server that is not the leader answers from its
// own state, which may lag the leader's. Status is a plain call on the
// store's connection, like List: it fails with driver.ErrUnavailable when
// the server cannot be reached or the store is closed, and with an error
// wrapping ctx's when ctx ends first.
func (s *Store) Status(ctx context.Context) (*dlmpb.StatusResponse, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	resp, err := s.rpc().Status(ctx, &dlmpb.StatusRequest{})
	if err != nil {
		return nil, s.rpcError(ctx, "status", err)
	}
	return resp, nil
}

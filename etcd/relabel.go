package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Relabeler = (*Store)(nil)

// Relabel rewrites the value of the grant's key with metadata, in one
// transaction guarded by the key's create revision, so that only the key
// the grant created is changed, and keeps the key's lease (and so its
// expiry). The key keeps its create revision, its place in the queue and
// the grant's token. A key that is gone, or was created again, is
// driver.ErrNotHeld. Watchers of the resource see the change.
func (s *Store) Relabel(ctx context.Context, req driver.Request, g driver.Grant, metadata string) error {
	t, err := s.lookup(ctx, req, g)
	if err != nil {
		return err
	}
	relabelled := req
	relabelled.Metadata = metadata
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)).
		Then(clientv3.OpPut(t.key, value(relabelled), clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return s.fail(ctx, "relabel", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q: the key of the grant was deleted", driver.ErrNotHeld, req.Resource)
	}
	return nil
}

package postgres

import (
	"context"
	"fmt"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Relabeler = (*Store)(nil)

// Relabel sets the metadata of the lock granted as g: it writes the
// holder's row in the holder table (an upsert, with the grant's token and
// time) on the holding connection, in one statement that first checks, in
// pg_locks, that this session is the backend that granted the lock and
// still holds it. A lock released or lost, or a session that no longer
// holds it, is driver.ErrNotHeld (the connection is then closed, as by
// Extend). Without a holder table (WithTable("")) it is
// driver.ErrUnsupported. Watchers learn of the change only through Notify.
func (s *Store) Relabel(ctx context.Context, req driver.Request, g driver.Grant, metadata string) error {
	l, err := s.handle(req, g)
	if err != nil {
		return err
	}
	if s.holders == nil {
		return fmt.Errorf("%w: postgres: no holder table (WithTable(\"\")) to keep metadata in", driver.ErrUnsupported)
	}
	return l.relabel(ctx, metadata)
}

// relabel writes the holder's row on the holding connection.
func (l *lock) relabel(ctx context.Context, metadata string) error {
	return l.turn(ctx, "relabel", func(ctx context.Context) error { return l.relabelLocked(ctx, metadata) })
}

func (l *lock) relabelLocked(ctx context.Context, metadata string) error {
	if err := l.goneLocked(); err != nil {
		return err
	}
	classid, objid := lockID(l.key)
	var pid int32
	var held bool
	err := l.h.query(ctx, l.store.holders.relabel,
		[]any{l.key, int64(l.token), l.since, metadata, classid, objid, l.pid, l.sql.lockMode}, &pid, &held)
	if err := l.stillHeld(ctx, "relabel", err, pid, held); err != nil {
		return err
	}
	l.recorded = true
	return nil
}

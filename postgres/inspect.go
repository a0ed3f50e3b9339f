package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Inspector = (*Store)(nil)

// Inspect returns the resource named exactly resource: the sessions that
// hold and await its advisory key (KeyOf) in pg_locks, read in one
// statement with the holders' rows in the holder table.
//
// Holders and waiters are shown as List shows them, Owner being the
// backend's pid, except for the metadata: a holder's Token, Metadata and
// Since come from the row its session wrote (an acquisition with metadata,
// or Relabel), and are zero for a session with no row. A row is matched to
// a holder by pid, and only if the pid's backend started before the row's
// grant, so that the row of a session that ended is never shown for a
// later session that happens to have the same pid; a role that may not see
// the start time of another role's sessions (it needs membership in that
// role, or pg_read_all_stats) matches by pid only. Waiters show their mode and when
// they started waiting (PostgreSQL 14+), no metadata. TTLs are zero: they
// are kept by the holding process.
//
// Inspect sets the store up first (see Setup) unless WithSetup(false) was
// given.
func (s *Store) Inspect(ctx context.Context, resource string) (driver.ResourceInfo, error) {
	if s.bad != nil {
		return driver.ResourceInfo{}, s.bad
	}
	if resource == "" {
		return driver.ResourceInfo{}, fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	}
	if s.setup {
		if err := s.Setup(ctx); err != nil {
			return driver.ResourceInfo{}, err
		}
	}
	key := KeyOf(resource)
	classid, objid := lockID(key)
	var rows pgx.Rows
	var err error
	if s.holders != nil {
		rows, err = s.pool.Query(ctx, s.holders.inspect, key, classid, objid)
	} else {
		rows, err = s.pool.Query(ctx, inspectNoTableSQL, classid, objid)
	}
	if err != nil {
		return driver.ResourceInfo{}, fail(ctx, "inspect", err)
	}
	defer rows.Close()
	var holders []holder
	var waiters []waiter
	for rows.Next() {
		var (
			pid              *int32
			vxid, meta       *string
			mode             string
			granted          bool
			waitStart, since *time.Time
			token            *int64
		)
		if err := rows.Scan(&pid, &vxid, &mode, &granted, &waitStart, &token, &meta, &since); err != nil {
			return driver.ResourceInfo{}, fail(ctx, "inspect", err)
		}
		owner, p := ownerOf(pid, vxid)
		if !granted {
			w := waiter{WaiterInfo: driver.WaiterInfo{Owner: owner, Mode: modeOfLock(mode)}, pid: p}
			if waitStart != nil {
				w.Since = *waitStart
			}
			waiters = append(waiters, w)
			continue
		}
		h := holder{HolderInfo: driver.HolderInfo{Owner: owner, Mode: modeOfLock(mode), Metadata: deref(meta)}, pid: p}
		if token != nil && *token > 0 {
			h.Token = uint64(*token)
		}
		if since != nil {
			h.Since = *since
		}
		holders = append(holders, h)
	}
	if err := rows.Err(); err != nil {
		return driver.ResourceInfo{}, fail(ctx, "inspect", err)
	}
	return resourceInfo(resource, holders, waiters), nil
}

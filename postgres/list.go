package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Lister = (*Store)(nil)

// listSQL reads the bigint advisory locks of the current database, held
// and awaited, with the application name of each backend. waitstart
// (PostgreSQL 14+) is read through to_jsonb so that older servers, which
// lack the column, answer NULL instead of an error.
const listSQL = `SELECT l.classid::int8, l.objid::int8, l.mode, l.granted, l.pid, l.virtualtransaction,
	a.application_name, (to_jsonb(l) ->> 'waitstart')::timestamptz
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// List returns the advisory locks of the database, held or awaited, as
// resources sorted by name, at most limit of them, from one read of
// pg_locks.
//
// PostgreSQL knows advisory locks by their 64-bit key only, and a resource
// name maps to its key through a hash (see KeyOf) that cannot be reversed:
// every resource shows as Key(n), "pgkey:<n>", whatever name it was taken
// with, and sorts as that string. So prefix must be empty, which lists every
// lock, or begin with "pgkey:", which filters on that form (KeyOf(name)
// gives the key of a known name); any other prefix is driver.ErrUnsupported.
// Advisory locks that other code took on a 64-bit key in the same database
// show too; those taken on two 32-bit keys do not.
//
// A holder or waiter is a database session: its Owner is the backend's pid
// in decimal (for a prepared transaction, which has none, its virtual
// transaction id), and its Metadata is the backend's application_name, as
// pg_stat_activity shows it; the store keeps no metadata of its own in the
// server, nor the request's owner id. Modes are EX (ExclusiveLock) and PR
// (ShareLock). Tokens and TTLs are kept by the process that holds the lock,
// not by the server, so they are zero, as is the time of a grant. Waiters
// are in the order they started waiting (pg_locks.waitstart, PostgreSQL
// 14+; by pid on older servers), which is the server's queue order unless
// its deadlock detector reordered the queue; Since is when they started
// waiting.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	if prefix != "" && !strings.HasPrefix(prefix, keyPrefix) {
		return nil, fmt.Errorf("%w: postgres lists advisory locks by key, as %q names: resource names are hashed and cannot be "+
			"listed by prefix %q (list with an empty prefix or a %q prefix)", driver.ErrUnsupported, keyPrefix+"<n>", prefix, keyPrefix)
	}
	rows, err := s.pool.Query(ctx, listSQL)
	if err != nil {
		return nil, fail(ctx, "list", err)
	}
	defer rows.Close()
	type entry struct {
		holders []holder
		waiters []waiter
	}
	byName := make(map[string]*entry)
	for rows.Next() {
		var (
			classid, objid int64
			mode           string
			granted        bool
			pid            *int32
			vxid, app      *string
			waitStart      *time.Time
		)
		if err := rows.Scan(&classid, &objid, &mode, &granted, &pid, &vxid, &app, &waitStart); err != nil {
			return nil, fail(ctx, "list", err)
		}
		name := Key(int64(uint64(classid)<<32 | uint64(uint32(objid))))
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		e := byName[name]
		if e == nil {
			e = &entry{}
			byName[name] = e
		}
		owner, p := ownerOf(pid, vxid)
		if granted {
			e.holders = append(e.holders, holder{driver.HolderInfo{Owner: owner, Mode: modeOfLock(mode), Metadata: deref(app)}, p})
			continue
		}
		w := waiter{WaiterInfo: driver.WaiterInfo{Owner: owner, Mode: modeOfLock(mode), Metadata: deref(app)}, pid: p}
		if waitStart != nil {
			w.Since = *waitStart
		}
		e.waiters = append(e.waiters, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(ctx, "list", err)
	}

	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	names = names[:min(len(names), limit)]
	out := make([]driver.ResourceInfo, len(names))
	for i, name := range names {
		e := byName[name]
		out[i] = resourceInfo(name, e.holders, e.waiters)
	}
	return out, nil
}

// holder and waiter are a holder and a waiter as read from pg_locks, with
// the backend pid, which orders holders, and waiters that started waiting
// at the same moment.
type (
	holder struct {
		driver.HolderInfo
		pid int32
	}
	waiter struct {
		driver.WaiterInfo
		pid int32
	}
)

// resourceInfo returns the resource name with its holders, in pid order,
// and its waiters, in the order they started waiting (one whose waitstart
// is not set yet has only just started), then in pid order.
func resourceInfo(name string, holders []holder, waiters []waiter) driver.ResourceInfo {
	info := driver.ResourceInfo{Resource: name}
	slices.SortStableFunc(holders, func(a, b holder) int { return cmp.Compare(a.pid, b.pid) })
	for _, h := range holders {
		info.Holders = append(info.Holders, h.HolderInfo)
	}
	slices.SortStableFunc(waiters, func(a, b waiter) int {
		switch {
		case a.Since.IsZero() != b.Since.IsZero():
			if a.Since.IsZero() {
				return 1
			}
			return -1
		case !a.Since.Equal(b.Since):
			return a.Since.Compare(b.Since)
		}
		return cmp.Compare(a.pid, b.pid)
	})
	for _, w := range waiters {
		info.Waiters = append(info.Waiters, w.WaiterInfo)
	}
	return info
}

// ownerOf returns the owner id of a lock in pg_locks, with its backend pid
// or 0: the pid in decimal, or for a prepared transaction, which has no
// backend, its virtual transaction id.
func ownerOf(pid *int32, vxid *string) (string, int32) {
	switch {
	case pid != nil:
		return strconv.FormatInt(int64(*pid), 10), *pid
	case vxid != nil:
		return *vxid, 0
	}
	return "", 0
}

// modeOfLock returns the dlm mode of a pg_locks mode of an advisory lock.
func modeOfLock(mode string) driver.Mode {
	switch mode {
	case "ExclusiveLock":
		return driver.EX
	case "ShareLock":
		return driver.PR
	}
	return 0
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

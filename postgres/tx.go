package postgres

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlmhq/dlm/driver"
)

// LockTx takes the lock on resource in mode (dlm.EX or dlm.PR) for the rest
// of the transaction tx, waiting as long as ctx allows, and returns the
// grant's fencing token. The lock (pg_advisory_xact_lock, or its _shared
// form) ends with the transaction, committed or rolled back: there is
// nothing to release, renew or lose separately, and it works behind a
// pooler in transaction mode. It excludes, and is excluded by, the store's
// session locks on the same resource.
//
// When ctx ends during the wait, pgx (with its default context handling)
// closes tx's connection, which ends the transaction; the server drops the
// abandoned wait when it notices. A server error aborts the transaction, as
// any failed statement does. The token's sequence advance is as durable as
// tx's commit.
func (s *Store) LockTx(ctx context.Context, tx pgx.Tx, resource string, mode driver.Mode) (uint64, error) {
	token, _, err := s.lockTx(ctx, tx, resource, mode, false)
	return token, err
}

// TryLockTx is LockTx without waiting: ok is false, with no error, when
// another session holds a conflicting lock on resource.
func (s *Store) TryLockTx(ctx context.Context, tx pgx.Tx, resource string, mode driver.Mode) (token uint64, ok bool, err error) {
	return s.lockTx(ctx, tx, resource, mode, true)
}

func (s *Store) lockTx(ctx context.Context, tx pgx.Tx, resource string, mode driver.Mode, try bool) (uint64, bool, error) {
	switch {
	case tx == nil:
		return 0, false, fmt.Errorf("%w: postgres: nil transaction", driver.ErrInvalid)
	case resource == "":
		return 0, false, fmt.Errorf("%w: resource name is empty", driver.ErrInvalid)
	case !utf8.ValidString(resource):
		return 0, false, fmt.Errorf("%w: resource name is not valid UTF-8", driver.ErrInvalid)
	}
	key, q, err := s.prepare(driver.Request{Resource: resource, Mode: mode})
	if err != nil {
		return 0, false, err
	}
	// Set up through the pool: inside tx, the sequence would be tied to
	// the caller's commit.
	if s.setup {
		if err := s.Setup(ctx); err != nil {
			return 0, false, err
		}
	}
	stmt := q.waitTx
	if try {
		stmt = q.tryTx
	}
	var token *int64
	if err := tx.QueryRow(ctx, stmt, key).Scan(&token); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return 0, false, fmt.Errorf("postgres lock in transaction: %w", err)
		}
		return 0, false, fail(ctx, "lock in transaction", err)
	}
	if token == nil {
		return 0, false, nil
	}
	return uint64(*token), true, nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Setup creates the fence sequence and the holder table if they do not
// exist. The store calls it before its first lock (and Inspect) unless
// WithSetup(false) was given; call it directly to fail fast at start-up.
func (s *Store) Setup(ctx context.Context) error {
	if s.bad != nil {
		return s.bad
	}
	if s.setupDone.Load() {
		return nil
	}
	select {
	case s.setupSem <- struct{}{}:
		defer func() { <-s.setupSem }()
	case <-ctx.Done():
		return fmt.Errorf("postgres setup: %w", ctx.Err())
	}
	if s.setupDone.Load() {
		return nil
	}
	if _, err := s.pool.Exec(ctx, s.createSQL); err != nil && !raced(err) {
		return fail(ctx, "setup", err)
	}
	if s.holders != nil {
		if _, err := s.pool.Exec(ctx, s.holders.create); err != nil && !raced(err) {
			return fail(ctx, "setup", err)
		}
	}
	s.setupDone.Store(true)
	return nil
}

// raced reports whether CREATE ... IF NOT EXISTS failed only because another
// session created the same object at the same moment.
func raced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07")
}

package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/postgres"
)

// PostgreSQL advisory locks: a held lock lives in one of the store's shared
// sessions (or, while it waits, on a pooled connection of its own), and the
// server frees it when that session ends.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := postgres.New(pool)
	defer store.Close(ctx) // before the pool's Close: defers run last first
	locks := dlm.New(store)

	err = locks.Do(ctx, "reports/nightly", func(ctx context.Context, l *dlm.Lease) error {
		// ctx ends if the lock is lost; hand the fencing token to what
		// you write to, so that it can refuse a stale holder.
		fmt.Println("holding reports/nightly with token", l.Token())
		return nil
	}, dlm.WithTTL(10*time.Second), dlm.WithWait(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

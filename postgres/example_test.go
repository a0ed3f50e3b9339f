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

// PostgreSQL advisory locks: a held lock keeps one pooled connection, and
// the server frees it when that session ends.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	locks := dlm.New(postgres.New(pool))

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

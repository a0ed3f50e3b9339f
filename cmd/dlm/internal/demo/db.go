package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// shop is the demo's database: a products table (stock and the fence, the
// highest fencing token a write was accepted with) and an orders table.
// Every instance has its own connection (conn), as separate service
// processes would; each call on a conn is one statement, or one
// transaction for sellFenced.
type shop interface {
	// kind is "memory" or "PostgreSQL"; where says where, for the report.
	kind() string
	where() string
	connect() (conn, error)
	addProduct(ctx context.Context, id string, stock int) error
	outcome(ctx context.Context, product string) (outcome, error)
	// drop removes what the run created and closes the shop.
	drop(ctx context.Context) error
}

// conn is one instance's connection to the shop.
type conn interface {
	// readStock is the first half of a purchase: how many are left.
	readStock(ctx context.Context, product string) (int, error)
	// sell is the second half of a purchase without fencing: it writes
	// the stock computed from an earlier read, then records the order.
	// Two plain statements, as the naive code does.
	sell(ctx context.Context, product string, newStock, instance int, token uint64) error
	// sellFenced is sell made conditional on the fencing token: the row
	// is written only if no write with this token or a later one was
	// accepted before, and the order is recorded in the same transaction.
	// It reports whether the write was accepted.
	sellFenced(ctx context.Context, product string, newStock, instance int, token uint64) (bool, error)
	Close() error
}

// outcome is what the database says about a product after an act.
type outcome struct {
	stock  int
	fence  uint64
	tokens []uint64 // of the orders, in the order they were recorded
}

// openShop opens the database at dbURL (empty: the in-memory one) and
// creates the run's tables.
func openShop(ctx context.Context, dbURL, run string) (shop, error) {
	if dbURL == "" {
		return newMemShop(), nil
	}
	s, err := openSQLShop(ctx, dbURL, run)
	if err != nil {
		return nil, err // not a nil *sqlShop in a non-nil shop
	}
	return s, nil
}

// sqlShop is a PostgreSQL database. The tables are named after the run,
// so runs sharing a database do not meet; drop removes them.
type sqlShop struct {
	dsn      string
	products string
	orders   string
	admin    *sql.DB // schema, setup and counts
}

func openSQLShop(ctx context.Context, dbURL, run string) (*sqlShop, error) {
	s := &sqlShop{dsn: dbURL, products: "dlm_demo_" + run + "_products", orders: "dlm_demo_" + run + "_orders"}
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	s.admin = db
	for _, q := range []string{
		`CREATE TABLE ` + s.products + ` (id TEXT PRIMARY KEY, stock INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`,
		`CREATE TABLE ` + s.orders + ` (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, product TEXT NOT NULL, instance INTEGER NOT NULL, token BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("demo: PostgreSQL: create tables: %w", err)
		}
	}
	return s, nil
}

func (s *sqlShop) kind() string  { return "PostgreSQL" }
func (s *sqlShop) where() string { return redact(s.dsn) }

// open returns a new connection pool.
func (s *sqlShop) open() (*sql.DB, error) {
	db, err := sql.Open("pgx", s.dsn)
	if err != nil {
		return nil, fmt.Errorf("demo: open PostgreSQL: %w", err)
	}
	db.SetMaxOpenConns(2)
	return db, nil
}

func (s *sqlShop) connect() (conn, error) {
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	return &sqlConn{s: s, db: db}, nil
}

func (s *sqlShop) drop(ctx context.Context) error {
	var errs []error
	for _, t := range []string{s.orders, s.products} {
		if _, err := s.admin.ExecContext(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.admin.Close())
	return errors.Join(errs...)
}

func (s *sqlShop) addProduct(ctx context.Context, id string, stock int) error {
	_, err := s.admin.ExecContext(ctx, `INSERT INTO `+s.products+` (id, stock) VALUES ($1, $2)`, id, stock)
	return err
}

func (s *sqlShop) outcome(ctx context.Context, product string) (outcome, error) {
	var o outcome
	var fence int64
	if err := s.admin.QueryRowContext(ctx, `SELECT stock, fence FROM `+s.products+` WHERE id = $1`, product).Scan(&o.stock, &fence); err != nil {
		return o, err
	}
	o.fence = uint64(fence)
	rows, err := s.admin.QueryContext(ctx, `SELECT token FROM `+s.orders+` WHERE product = $1 ORDER BY id`, product)
	if err != nil {
		return o, err
	}
	defer rows.Close()
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return o, err
		}
		o.tokens = append(o.tokens, uint64(t))
	}
	return o, rows.Err()
}

// sqlConn is one instance's connection pool.
type sqlConn struct {
	s  *sqlShop
	db *sql.DB
}

func (c *sqlConn) Close() error { return c.db.Close() }

func (c *sqlConn) readStock(ctx context.Context, product string) (int, error) {
	var stock int
	err := c.db.QueryRowContext(ctx, `SELECT stock FROM `+c.s.products+` WHERE id = $1`, product).Scan(&stock)
	return stock, err
}

func (c *sqlConn) sell(ctx context.Context, product string, newStock, instance int, token uint64) error {
	if _, err := c.db.ExecContext(ctx, `UPDATE `+c.s.products+` SET stock = $1 WHERE id = $2`, newStock, product); err != nil {
		return err
	}
	_, err := c.db.ExecContext(ctx, `INSERT INTO `+c.s.orders+` (product, instance, token) VALUES ($1, $2, $3)`,
		product, instance, int64(token))
	return err
}

func (c *sqlConn) sellFenced(ctx context.Context, product string, newStock, instance int, token uint64) (bool, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	res, err := tx.ExecContext(ctx, `UPDATE `+c.s.products+` SET stock = $1, fence = $2 WHERE id = $3 AND fence < $2`,
		newStock, int64(token), product)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+c.s.orders+` (product, instance, token) VALUES ($1, $2, $3)`,
		product, instance, int64(token)); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// redact returns a database URL without its password and parameters, for
// the report.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery = ""
	return u.Redacted()
}

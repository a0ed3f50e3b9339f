package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"
)

// shop is the demo's database: a products table (stock and the fence, the
// highest fencing token a write was accepted with) and an orders table. The
// tables are named after the run, so runs sharing a PostgreSQL database do
// not meet; drop removes them.
type shop struct {
	kind     string // "SQLite" or "PostgreSQL"
	where    string // the file, or the server without credentials
	driver   string
	dsn      string
	products string
	orders   string
	admin    *sql.DB // schema, setup and counts
}

// openShop opens the database at dbURL (empty: a SQLite file in dir) and
// creates the run's tables.
func openShop(ctx context.Context, dbURL, dir, run string) (*shop, error) {
	s := &shop{products: "dlm_demo_" + run + "_products", orders: "dlm_demo_" + run + "_orders"}
	idColumn := "id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
	if dbURL == "" {
		file := filepath.Join(dir, "shop.db")
		s.kind, s.where, s.driver = "SQLite", file+" (WAL)", "sqlite"
		// Each connection waits up to 10 s for the write lock instead of
		// failing with SQLITE_BUSY; transactions take it when they begin.
		s.dsn = "file:" + file + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		idColumn = "id INTEGER PRIMARY KEY AUTOINCREMENT"
	} else {
		s.kind, s.where, s.driver, s.dsn = "PostgreSQL", redact(dbURL), "pgx", dbURL
	}
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	s.admin = db
	for _, q := range []string{
		`CREATE TABLE ` + s.products + ` (id TEXT PRIMARY KEY, stock INTEGER NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`,
		`CREATE TABLE ` + s.orders + ` (` + idColumn + `, product TEXT NOT NULL, instance INTEGER NOT NULL, token BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("demo: %s: create tables: %w", s.kind, err)
		}
	}
	return s, nil
}

// open returns a new connection pool: each instance has its own, as
// separate service processes would.
func (s *shop) open() (*sql.DB, error) {
	db, err := sql.Open(s.driver, s.dsn)
	if err != nil {
		return nil, fmt.Errorf("demo: open %s: %w", s.kind, err)
	}
	db.SetMaxOpenConns(2)
	return db, nil
}

// drop removes the run's tables and closes the admin pool.
func (s *shop) drop(ctx context.Context) error {
	var errs []error
	for _, t := range []string{s.orders, s.products} {
		if _, err := s.admin.ExecContext(ctx, `DROP TABLE IF EXISTS `+t); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.admin.Close())
	return errors.Join(errs...)
}

// addProduct puts a product on sale with stock items.
func (s *shop) addProduct(ctx context.Context, id string, stock int) error {
	_, err := s.admin.ExecContext(ctx, `INSERT INTO `+s.products+` (id, stock) VALUES ($1, $2)`, id, stock)
	return err
}

// readStock is the first half of a purchase: how many are left.
func (s *shop) readStock(ctx context.Context, db *sql.DB, product string) (int, error) {
	var stock int
	err := db.QueryRowContext(ctx, `SELECT stock FROM `+s.products+` WHERE id = $1`, product).Scan(&stock)
	return stock, err
}

// sell is the second half of a purchase without fencing: it writes the
// stock it computed from its own earlier read, then records the order. Two
// plain statements, as the naive code does.
func (s *shop) sell(ctx context.Context, db *sql.DB, product string, newStock, instance int, token uint64) error {
	if _, err := db.ExecContext(ctx, `UPDATE `+s.products+` SET stock = $1 WHERE id = $2`, newStock, product); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `INSERT INTO `+s.orders+` (product, instance, token) VALUES ($1, $2, $3)`,
		product, instance, int64(token))
	return err
}

// sellFenced is sell made conditional on the fencing token: the row is
// written only if no write with this token or a later one was accepted
// before, and the order is recorded in the same transaction. It reports
// whether the write was accepted.
func (s *shop) sellFenced(ctx context.Context, db *sql.DB, product string, newStock, instance int, token uint64) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	res, err := tx.ExecContext(ctx, `UPDATE `+s.products+` SET stock = $1, fence = $2 WHERE id = $3 AND fence < $2`,
		newStock, int64(token), product)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.orders+` (product, instance, token) VALUES ($1, $2, $3)`,
		product, instance, int64(token)); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// outcome is what the database says about a product after an act.
type outcome struct {
	stock  int
	fence  uint64
	tokens []uint64 // of the orders, in the order they were recorded
}

func (s *shop) outcome(ctx context.Context, product string) (outcome, error) {
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

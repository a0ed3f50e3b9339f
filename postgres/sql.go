package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/dlmhq/dlm/driver"
)

// The grant statement takes the lock and, only if granted, the next token,
// in one round trip. The materialised CTEs fix the order: the session's
// backend pid and synchronous_commit first, then the lock, then nextval.
// The lock is taken only when the pid matches the one the connection
// reported at start-up ($2), unless the pooler check is off ($3 false); a
// NULL "granted" means a pooler was detected and nothing was taken.
// Forcing synchronous_commit for this statement's commit makes the
// sequence's advance durable before the token is returned. The last column
// is the server's clock once the lock is granted: the grant's Since.
const grantSQL = `WITH s AS MATERIALIZED (
	SELECT pg_backend_pid() AS pid, set_config('synchronous_commit', 'on', true) AS sync
), l AS MATERIALIZED (
	SELECT pid, CASE WHEN (pid = $2 OR NOT $3) AND sync = 'on' THEN %s END AS granted FROM s
)
SELECT pid, granted, CASE WHEN granted THEN nextval(%s) END, clock_timestamp() FROM l`

// unlockSQL releases the lock on the backend that granted it ($2) only;
// "unlocked" is NULL when the connection now reaches another backend.
const unlockSQL = `WITH s AS MATERIALIZED (SELECT pg_backend_pid() AS pid)
SELECT pid, CASE WHEN pid = $2 THEN %s($1) END FROM s`

// heldSQL tells whether this session holds the advisory lock whose key is
// split into $1 and $2, in the pg_locks mode $3.
const heldSQL = `SELECT pg_backend_pid(), EXISTS (
	SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
	  AND classid = $1 AND objid = $2 AND objsubid = 1 AND mode = $3
)`

// resetSQL unlocks key $1 if this session holds it, in the pg_locks mode
// $4 ($2 and $3 are the key's halves); checking first keeps the server's
// log free of "you don't own a lock" warnings.
const resetSQL = `SELECT CASE WHEN EXISTS (
	SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
	  AND classid = $2 AND objid = $3 AND objsubid = 1 AND mode = $4
) THEN %s($1) ELSE false END`

// The transaction-scoped statements: the token only when granted.
const (
	tryTxSQL  = `SELECT CASE WHEN %s($1) THEN nextval(%s) END`
	waitTxSQL = `WITH l AS MATERIALIZED (SELECT %s($1)) SELECT nextval(%s) FROM l`
)

// modeSQL is the SQL of one lock mode.
type modeSQL struct {
	try, wait     string // grant statements
	unlock        string // unlockSQL
	reset         string // resetSQL, for cleaning up after a failed grant
	lockMode      string // the mode as pg_locks shows it
	tryTx, waitTx string
	// The grant and unlock statements that also write and delete the
	// holder's row (holders.go); empty without a holder table.
	tryRecord, waitRecord, unlockRecord string
}

// statements returns the SQL of each supported mode for the fence sequence
// and the holder table named by the quoted identifiers seq and table
// (table empty: none).
func statements(seq, table string) map[driver.Mode]*modeSQL {
	lit := "'" + strings.ReplaceAll(seq, "'", "''") + "'"
	build := func(suffix, lockMode string) *modeSQL {
		try := "pg_try_advisory_lock" + suffix + "($1)"
		wait := "pg_advisory_lock" + suffix + "($1) IS NOT NULL"
		q := &modeSQL{
			try:      fmt.Sprintf(grantSQL, try, lit),
			wait:     fmt.Sprintf(grantSQL, wait, lit),
			unlock:   fmt.Sprintf(unlockSQL, "pg_advisory_unlock"+suffix),
			reset:    fmt.Sprintf(resetSQL, "pg_advisory_unlock"+suffix),
			lockMode: lockMode,
			tryTx:    fmt.Sprintf(tryTxSQL, "pg_try_advisory_xact_lock"+suffix, lit),
			waitTx:   fmt.Sprintf(waitTxSQL, "pg_advisory_xact_lock"+suffix, lit),
		}
		if table != "" {
			q.tryRecord = recordGrant(try, lit, table)
			q.waitRecord = recordGrant(wait, lit, table)
			q.unlockRecord = recordUnlock("pg_advisory_unlock"+suffix, table)
		}
		return q
	}
	return map[driver.Mode]*modeSQL{
		driver.EX: build("", "ExclusiveLock"),
		driver.PR: build("_shared", "ShareLock"),
	}
}

// qualifiedIdent quotes the name of a database object of the kind given
// ("sequence", "table"), optionally schema-qualified ("locks.fence"), as
// an SQL identifier.
func qualifiedIdent(kind, name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: %s name %q has more than one dot", driver.ErrInvalid, kind, name)
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 || strings.ContainsRune(p, 0) {
			return "", fmt.Errorf("%w: %s name %q: each part must be 1 to 63 bytes without NUL", driver.ErrInvalid, kind, name)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}

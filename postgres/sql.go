package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/dlmhq/dlm/driver"
)

// The grant statement takes the lock and, only if granted, the next token,
// in one round trip, as one flat SELECT: a materialised CTE costs the
// server a tuplestore per call. The CASE evaluates its conditions in order
// and only as far as needed: first the pooler check (unless it is off, $3
// false), which takes nothing when the session's backend pid is not the
// one the connection reported at start-up ($2); then the lock; then, only
// if granted, nextval. The token is NULL unless the lock was granted
// (nextval never returns NULL); with the pooler check on, a NULL token and
// a pid other than $2 mean a pooler was detected and nothing was taken.
// The third column is the server's clock once the lock is granted: the
// grant's Since.
//
// The last column makes the token durable before it is returned. nextval
// writes WAL only when it logs the sequence ahead (once every 32 values, and
// after a checkpoint), and then assigns the transaction an id, whose commit
// is synchronous only if synchronous_commit is on. So, after the token
// (PostgreSQL projects a target list in order), a transaction that has an
// id turns synchronous_commit on for its own commit; one without wrote no
// WAL and has nothing to flush. The server pays set_config, and restoring
// the setting at commit, once every 32 grants instead of on every grant.
const grantSQL = `SELECT pg_backend_pid(),
	CASE WHEN pg_backend_pid() <> $2 AND $3 THEN NULL WHEN %s THEN nextval(%s) END,
	clock_timestamp(), ` + durableSQL

// durableSQL is the column, evaluated after nextval, that turns
// synchronous_commit on for the commit of a statement whose nextval wrote
// WAL (see grantSQL).
const durableSQL = `CASE WHEN pg_current_xact_id_if_assigned() IS NULL THEN 'on'
	ELSE set_config('synchronous_commit', 'on', true) END`

// unlockSQL releases the lock on the backend that granted it ($2) only;
// "unlocked" is NULL when the connection now reaches another backend.
const unlockSQL = `SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() = $2 THEN %s($1) END`

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

// jointStatements returns the statements of modes that may share a
// transaction on a shared session: those whose effects do not depend on
// their transaction committing. Advisory locks and unlocks at session level,
// nextval and reading pg_locks are outside transactions; the durability of
// a grant's token comes from the transaction's commit, and a shared session
// answers no statement before its transaction ended. The statements that
// write the holder table are not among them.
func jointStatements(modes map[driver.Mode]*modeSQL) map[string]bool {
	joint := map[string]bool{heldSQL: true}
	for _, q := range modes {
		joint[q.try], joint[q.unlock], joint[q.reset] = true, true, true
	}
	return joint
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

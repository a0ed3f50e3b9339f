package postgres

// The holder table keeps what PostgreSQL does not keep with an advisory
// lock: per advisory key and holding backend, the grant's token, the
// holder's metadata and when it was granted (see the package documentation,
// "Holder records"). A row belongs to the session that holds the lock: only
// that session writes it, on its own connection, in a statement that
// checks that it holds the lock; it deletes it in the statement that
// unlocks. A row that outlives its session (a crash, a lost connection) is
// never shown: readers join rows to the sessions that pg_locks shows
// holding the key, by pid, and only if the pid's backend started before
// the row's grant (a later backend with the same pid started after the
// row's session ended). The next write of a row for a key deletes that
// key's stale rows.

// holderSQL is the SQL of the holder table.
type holderSQL struct {
	create  string // CREATE UNLOGGED TABLE IF NOT EXISTS
	relabel string // relabelSQL, then upsert and stale
	inspect string // inspectSQL
}

// holderStatements returns the SQL of the holder table named by the quoted
// identifier table.
func holderStatements(table string) *holderSQL {
	return &holderSQL{
		create:  "CREATE UNLOGGED TABLE IF NOT EXISTS " + table + tableColumns,
		relabel: relabelSQL + upsert(table) + stale(table) + "\nSELECT pid, granted FROM g",
		inspect: inspectSQL(table),
	}
}

// tableColumns are the columns of the holder table. The table is UNLOGGED:
// its rows describe sessions, which a server crash ends, and crash
// recovery empties an unlogged table; it also spares the WAL.
const tableColumns = ` (
	lock_key bigint NOT NULL,
	pid integer NOT NULL,
	token bigint NOT NULL,
	metadata text NOT NULL,
	since timestamptz NOT NULL,
	PRIMARY KEY (lock_key, pid)
)`

// upsert and stale are the data-modifying CTEs that follow a CTE g of one
// row (pid, granted, token, since): when granted, upsert writes the
// session's row of key $1 with the metadata $4, and stale deletes the rows
// of key $1 (whose halves are $5 and $6) that sessions which no longer
// hold it wrote. Data-modifying CTEs run whether or not the final query
// reads them, on the statement's one snapshot, after the materialised g.
// stale reads pg_locks (a scan of the server's lock table) only for rows
// of other sessions, which are rare: a correlated count, not NOT EXISTS,
// which the planner makes an anti join that scans pg_locks every time.
func upsert(table string) string {
	return `, r AS (
	INSERT INTO ` + table + ` (lock_key, pid, token, metadata, since)
	SELECT $1::bigint, g.pid, g.token, $4::text, g.since FROM g WHERE g.granted
	ON CONFLICT (lock_key, pid) DO UPDATE SET
	  token = EXCLUDED.token, metadata = EXCLUDED.metadata, since = EXCLUDED.since
)`
}

func stale(table string) string {
	return `, d AS (
	DELETE FROM ` + table + ` AS t USING g WHERE g.granted AND t.lock_key = $1 AND t.pid <> g.pid AND (
		SELECT count(*) FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.pid = t.pid
		  AND k.classid = $5 AND k.objid = $6 AND k.objsubid = 1
		  AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	) = 0
)`
}

// recordGrant returns grantSQL that also writes the holder's row, with the
// token, the metadata $4 and the grant's time, and deletes the key's stale
// rows, in the same statement; lock and seq are as in grantSQL. The
// durability column comes last, after g has been read and so after nextval.
func recordGrant(lock, seq, table string) string {
	return `WITH t AS MATERIALIZED (
	SELECT pg_backend_pid() AS pid,
	  CASE WHEN pg_backend_pid() <> $2 AND $3 THEN NULL WHEN ` + lock + ` THEN nextval(` + seq + `) END AS token,
	  clock_timestamp() AS since
), g AS MATERIALIZED (
	SELECT pid, token IS NOT NULL AS granted, token, since FROM t
)` + upsert(table) + stale(table) + `
SELECT pid, token, since, ` + durableSQL + ` FROM g`
}

// recordUnlock returns unlockSQL that also deletes the holder's row of key
// $1, on the backend that granted the lock ($2) only; unlock is the unlock
// function.
func recordUnlock(unlock, table string) string {
	return `WITH s AS MATERIALIZED (SELECT pg_backend_pid() AS pid),
d AS (DELETE FROM ` + table + ` WHERE lock_key = $1 AND pid = $2 AND (SELECT pid FROM s) = $2)
SELECT pid, CASE WHEN pid = $2 THEN ` + unlock + `($1) END FROM s`
}

// relabelSQL starts the statement of Relabel: g is the session, which
// "granted" only if it is the backend that granted the lock ($7) and holds
// the lock on key $1 (halves $5 and $6) in the pg_locks mode $8; the row
// gets the token $2 and the time of the grant $3.
const relabelSQL = `WITH g AS MATERIALIZED (
	SELECT pg_backend_pid() AS pid, pg_backend_pid() = $7 AND EXISTS (
		SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
		  AND classid = $5 AND objid = $6 AND objsubid = 1 AND mode = $8
	) AS granted, $2::bigint AS token, $3::timestamptz AS since
)`

// inspectSQL returns the statement of Inspect: the advisory locks of key $1
// (halves $2 and $3) in this database, held and awaited, each holder with
// its row if it has one. A row matches a holder by pid, if the pid's
// backend started before the row's grant, which tells a live session from
// an earlier one with the same pid; where the reading role may not see the
// holder's backend start (another role's session, without
// pg_read_all_stats), by pid only.
func inspectSQL(table string) string {
	return `SELECT l.pid, l.virtualtransaction, l.mode, l.granted, (to_jsonb(l) ->> 'waitstart')::timestamptz,
	r.token, r.metadata, r.since
FROM pg_locks l
LEFT JOIN LATERAL (
	SELECT backend_start FROM pg_stat_get_activity(l.pid) WHERE l.granted AND l.pid IS NOT NULL
) a ON true
LEFT JOIN ` + table + ` r ON l.granted AND r.lock_key = $1 AND r.pid = l.pid
	AND (a.backend_start <= r.since OR a.backend_start IS NULL)
WHERE l.locktype = 'advisory' AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`
}

// inspectNoTableSQL is the statement of Inspect without a holder table:
// the advisory locks of the key whose halves are $1 and $2.
const inspectNoTableSQL = `SELECT l.pid, l.virtualtransaction, l.mode, l.granted, (to_jsonb(l) ->> 'waitstart')::timestamptz,
	NULL::bigint, NULL::text, NULL::timestamptz
FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

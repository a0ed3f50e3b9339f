// Package postgres is the dlm store for PostgreSQL: session-level advisory
// locks through the caller's pgx v5 pool, exclusive (EX) and shared (PR),
// with fencing tokens from a database sequence.
//
//	pool, _ := pgxpool.New(ctx, "postgres://locks@db/app")
//	store := postgres.New(pool)
//	defer store.Close(ctx)
//	locks := dlm.New(store)
//
// # Connections and shared sessions
//
// An advisory lock belongs to the database session that took it, so the lock
// and its unlock must run in the same session; one session may hold any
// number of locks. The store keeps a few shared sessions (WithSessions, 2 by
// default): connections taken out of the pool for the store's life, each
// sending the statements of many leases in rounds, pipelined (one write for
// a round, answers read in order). The statements of a round whose effects
// do not depend on a commit (the grant, the unlock, the Extend check:
// session advisory locks and nextval are outside transactions) run in one
// implicit transaction, so the server pays one transaction and one flush of
// its answers for the round instead of one each; a statement that writes
// the holder table has a transaction of its own. No answer is given before
// its transaction committed, so a token whose sequence advance was logged
// is durable when its grant returns. Should one statement of a shared
// transaction fail, the server skips those after it, and the store sends
// them again, each on its own; those before it did what they did, and are
// answered once a transaction committed after them flushed the log. A caller that finds its session idle sends its statement and
// reads the answer itself, as a pgx query would; statements that arrive
// meanwhile queue, and the session's goroutine sends them in rounds. The
// sessions speak PostgreSQL's protocol themselves, on connections taken
// over from pgx (pgconn's Hijack). An acquisition that does not wait
// takes its lock on the shared session of its key, and the lock's Extend,
// Relabel and Release run there too. Concurrent leases thus share round
// trips and server processes: holding a thousand locks takes two
// connections, not a thousand, and under load a lock cycle costs the server
// less than plain pg_advisory_lock on a connection per locker (see
// BENCHMARKS.md).
//
// What a shared session changes, and how the store keeps the guarantees:
//
//   - PostgreSQL grants a session a lock it already holds. The store never
//     asks a shared session for a key that a lock of this store holds on
//     one: that second request (another owner in the same process, or a
//     second shared reader) runs on a connection of its own, where the
//     server decides as between any two sessions.
//   - A waiting acquisition (below) blocks its session, so it runs on a
//     connection of its own, pinned from the wait to the release.
//   - When a shared session ends (its connection broke, the backend was
//     terminated, the server restarted), every lock on it ends with it, as
//     one connection's locks always did; each lease learns it at its next
//     Extend (driver.ErrNotHeld), so at the latest at its renewal. The store
//     ends a shared session itself only when it cannot make sure that a
//     lock on it is gone otherwise (an unlock the server refused, a
//     session that no longer reaches the backend that granted), and when a
//     round of statements, none of which waits for a lock, gets no answer
//     for 30 s (up to a minute). The next acquisition opens a new one.
//   - A caller whose context ends stops waiting for its statement at once,
//     even while it reads the answer itself (the session's goroutine reads
//     on), but a statement once sent runs, and its outcome is settled in
//     the session: a grant nobody waits for any more is unlocked, a failed
//     grant is reset, an unlock completes.
//
// An Extend, Release or Relabel whose context ends first returns at once,
// but its statement runs to its answer (for up to 2 s more) and the lock's
// next call waits for it: a call cut short never breaks the connection that
// holds the lock, and a Release made again after one given up returns the
// first one's outcome, so a Release that returned nil has freed the lock.
//
// A lock on a connection of its own keeps it from the grant to the release;
// after a clean unlock the connection goes back to the pool, and after any
// doubt (an error, a cancelled statement) it is closed instead, so that no
// connection ever returns to the pool with a lock on it. Size the pool for
// the waits in progress plus the application's own use, or give the store
// a pool of its own; the shared sessions do not count against the pool's
// MaxConns once taken. WithSessions(0) turns the shared sessions off: every
// lock then takes a connection of the pool, as a plain pgx program would.
//
// Close ends the shared sessions, and with them their locks; call it before
// closing the pool (pgxpool.Pool.Close waits for the connections that locks
// of their own still hold, not for the shared sessions, which would
// otherwise stay open until the process exits).
//
// # Waiting
//
// A waiting acquisition (driver.Waiter) runs pg_advisory_lock on its
// connection: the server queues it, grants locks in queue order (a new
// request, even a try-lock, does not pass a queued conflicting one, so
// writers are not starved by readers), and answers the moment it is granted.
// Nobody polls. When the context ends first, the store sends PostgreSQL a
// cancel request for the waiting statement, so the waiter leaves the queue at
// once and the connection stays usable; if the lock was granted just as the
// cancel arrived, it is unlocked. If the server cannot be told, the
// connection is closed. A lock_timeout or statement_timeout configured for
// the role also ends a wait, reported as contention.
//
// # Keys
//
// Advisory locks are named by a bigint. A resource name maps to the first 8
// bytes of SHA-256 of "dlm\x00" + name, the same in every process, build and
// version (see KeyOf). Two distinct names share a key with probability 2^-64;
// among n names locked at the same time in one database, by dlm or any other
// user of 64-bit advisory keys, the chance of any collision is about
// n²/2^65 (3·10^-8 for a million). A collision only makes two unrelated
// names exclude each other; it never lets two owners hold one name. To lock
// a key chosen by other code, such as pg_advisory_lock(42) elsewhere, use the
// resource name Key(42).
//
// # Fencing tokens
//
// Each grant takes its token from one sequence (dlm_fence by default, see
// WithSequence) in the same statement that takes the lock, after the lock is
// granted. Tokens therefore strictly increase for every resource, in fact
// across all resources of the database, with gaps. PostgreSQL writes a
// sequence's advance to the WAL ahead of use, once every 32 values and
// after each checkpoint; a grant statement whose nextval did so commits
// with synchronous_commit on whatever the server's setting (the others
// wrote nothing), so tokens keep growing across server crashes and
// restarts; they do not survive restoring an older backup or failing over
// to an asynchronous replica that missed the last commits. The store creates the sequence on first use unless
// WithSetup(false) is given; the schema, for migrations, is:
//
//	CREATE SEQUENCE IF NOT EXISTS dlm_fence AS bigint;
//	GRANT USAGE ON SEQUENCE dlm_fence TO locking_role;
//
// # TTL, Extend and loss
//
// PostgreSQL has no TTL for advisory locks: it keeps one as long as the
// session that took it lives. The TTL is kept by the store, in the process:
// a lock not extended within its TTL is unlocked (package dlm counts the
// lease as lost slightly before that). Extend checks that the holding
// session is alive and still holds the lock (pg_locks, on the holding
// connection) before it moves that expiry. A session that ended (the
// backend was terminated, the server restarted, the connection broke, or it
// was closed because a statement on it was cancelled) took its lock with
// it: Extend then returns driver.ErrNotHeld, so the lease's renewal at TTL/3
// reports the loss. Extend returns driver.ErrUnavailable only when the
// server answered with an error and the session survived.
//
// A client that crashes or is cut off leaves its lock held, whatever the
// TTL, until PostgreSQL notices the dead session: at once for a closed
// socket, otherwise when TCP keepalive gives up. (A cut-off client's own
// lease is lost at its deadline, as no Extend succeeds: the lock outlives
// its holder's claim, never the reverse.) Set the server's tcp_keepalives_idle,
// tcp_keepalives_interval and tcp_keepalives_count (for example 10 s, 5 s,
// 3), and client_connection_check_interval (PostgreSQL 14+) so that a dead
// client's waits leave the queue too. Keep idle_session_timeout off, or above
// the TTL/3 renewal interval, for the locking role: it ends idle sessions,
// and their locks with them.
//
// # Connection poolers
//
// Session locks need a session: through PgBouncer (or any pooler) in
// transaction or statement mode, consecutive statements of one client
// connection run on different server sessions, so a lock would be taken on
// one and "released" on another. The store detects a pooler in the grant
// statement itself, before taking the lock: the backend's pg_backend_pid()
// differs from the process id the connection reported at start-up (a pooler
// reports its own), and the acquisition fails with driver.ErrUnsupported.
// Behind a pooler in session mode, where session locks work, turn the check
// off with WithPoolerCheck(false); Extend and Release still verify that the
// backend is the one that granted the lock. For transaction pooling use the
// transaction-scoped LockTx and TryLockTx, whose locks end with the
// transaction.
//
// The store must talk to the primary: a standby cannot run nextval.
//
// # Holder records
//
// PostgreSQL keeps nothing with an advisory lock but its key and the
// session that holds it. For elections, which need a leader's value, term
// and start, the store keeps them in a holder table (dlm_holders by
// default, see WithTable): per advisory key and holding session (backend
// pid), the grant's token, the holder's metadata and the server's time of
// the grant. A row is written only by the
// session that holds the lock, on its own connection, in a statement that
// checks pg_locks: an acquisition with non-empty metadata writes it in its
// grant statement (the same round trip; an acquisition without metadata
// writes nothing), and Relabel writes or rewrites it. The unlock statement
// deletes it. A row whose session ended without unlocking (a crash, a lost
// connection) stays until the next row written for that key deletes it,
// but it is never shown: Inspect joins rows to the sessions that pg_locks
// shows holding the key, by pid, and only if that pid's backend started
// before the row's grant (a later session with a reused pid started after
// the row's session ended). The table is
// UNLOGGED: a crash, which ends every session, empties it, and its writes
// skip the WAL. WithSetup creates it with the sequence; for migrations:
//
//	CREATE UNLOGGED TABLE IF NOT EXISTS dlm_holders (
//		lock_key bigint NOT NULL,
//		pid integer NOT NULL,
//		token bigint NOT NULL,
//		metadata text NOT NULL,
//		since timestamptz NOT NULL,
//		PRIMARY KEY (lock_key, pid)
//	);
//	GRANT SELECT, INSERT, UPDATE, DELETE ON dlm_holders TO locking_role;
//
// With WithSetup(false), create the table before using metadata or
// Relabel: an acquisition with metadata fails (driver.ErrUnavailable,
// naming the table) when it is missing. WithTable("") turns the table off.
//
// # Elections
//
// The store implements the interfaces of package dlm's elections:
// driver.Inspector (Inspect: pg_locks and the holder table, in one
// statement), driver.Relabeler (Relabel, above), and driver.Watcher with
// driver.Notifier. Watch runs LISTEN on a channel of the resource's own
// (Channel) on a pooled connection that it keeps while it watches, and
// Notify runs NOTIFY on it; package dlm notifies after each change it makes
// to an election. PostgreSQL announces nothing by itself, least of all the
// end of a session that held a lock, so Watch also signals every watch
// interval (WithWatchInterval, 1 s by default): that interval bounds how
// late a watcher learns of a holder that vanished or of a change nobody
// announced.
//
// The store does not set driver.Grant.Blocking (nor declare
// driver.FeatureBlocking): PostgreSQL tells a holder nothing of the
// sessions that queue behind it, and seeing them would take polling
// pg_locks.
package postgres

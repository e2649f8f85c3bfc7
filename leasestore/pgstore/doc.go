// Package pgstore is leasectl's PostgreSQL store, for many hosts sharing
// one PostgreSQL. It registers the postgres:// and postgresql:// schemes;
// URLs are libpq's, with the password from the URL, PGPASSWORD or
// ~/.pgpass, and libpq's sslmode values.
//
// # What it guarantees
//
// What leasestore.Store promises, as long as PostgreSQL keeps what it
// committed (fsync on, and for failover synchronous replication): leases,
// evidence and history survive a restart of the server, which a run rides
// out if it comes back within the run's safety window. Fencing tokens rise
// even after the job's rows are deleted or the tables truncated: a token is
// max(last token + 1, the server's clock_timestamp() in µs). It does not
// guarantee mutual exclusion after a failover to a replica that lost
// acknowledged commits (asynchronous replication); tokens still rise then,
// unless the new primary's clock is behind the old one's.
//
// # Layout
//
// Each namespace is a schema of that name (a 64-byte namespace, longer
// than an identifier, is cut and suffixed with a hash; names starting with
// pg_ are refused): the tables jobs (the record, one row per job, which is
// also the job's lock; since schema version 4 with the job's expectation and
// due_at, when it becomes overdue, a column PostgreSQL generates from the
// last success and the expectation and that an index makes Overdue's range),
// runs (liveness and evidence of the runs in flight, since schema version 5
// one row per slot in use, keyed by job and slot, indexed by liveness
// expiry), queue (since version 5, each job's waiters in the order they
// started waiting), history (the last 20 events per job), a
// meta table with the schema version, and the functions in sql/ that are
// the only way leasectl reads or changes them. Each operation is one call
// of one function, so one transaction, in the spirit of the Redis store's
// Lua scripts: it locks the job's row (FOR NO KEY UPDATE), reads
// clock_timestamp() once after the lock (now() is the transaction's start,
// stale after a lock wait), decides and writes. No session state is used:
// no session-level advisory lock, no prepared statement, no temporary
// table, so that every call works behind PgBouncer's transaction pooling.
//
// The functions are SECURITY DEFINER with a fixed search_path: the role a
// run uses needs USAGE on the schema and nothing else, and cannot change
// the tables except through them. The schema is created and migrated by
// version on first use, or ahead of time by `leasectl store migrate` (the
// script: MigrationSQL), in one transaction under a transaction-scoped
// advisory lock, so that processes starting at once wait for one
// migration. Every function checks the version its caller expects
// (SQLSTATE LC001): an older schema is migrated, a newer one refused.
//
// # Reaper and waiters
//
// Scan locks the jobs of up to 1,000 expired runs at a time, oldest first,
// with FOR UPDATE SKIP LOCKED: reapers on several hosts never wait for one
// another, nor for an acquire in progress, and whoever holds a job's lock
// counts its crash, once. The crashes of a batch are counted set by set in
// one statement (sql/lib.sql, _count_crashes), through the index on the
// liveness expiry, so a scan's cost follows the crashed runs.
//
// Waiters are served in the order they started waiting, and woken by
// LISTEN/NOTIFY: acquire follows package rules' steps in plpgsql, so a
// waiting request takes or keeps its place in the queue table in the same
// transaction that refuses it, under the job's row lock, and a free slot
// goes only to a request with fewer waiters ahead than slots free; a
// waiter subscribes before its first request, so no release after it
// joined is missed. Release, a counted crash, unquarantine, a late outcome
// that releases a run or lifts a quarantine, and a waiter leaving while a
// slot is free notify the job's channel when they commit. A subscription
// is a connection of its own; when it is lost, it reconnects and wakes its
// waiter once, since what was sent meanwhile is lost. Behind PgBouncer in
// transaction pooling, LISTEN does not work and waiters wake at the
// holder's expiry, as the supervisor always also does.
//
// # Late outcomes
//
// RecordLate is one call of
// sql/recordlate.sql: a release while the run's evidence is there;
// otherwise the walk of the job's history that package rules does, in
// plpgsql, under the job's row lock, so that it neither holds that lock
// across client round trips nor retries a guarded write. The last holder
// that gave up on its grant (Token 0) is kept in jobs.gave_up, and acquire
// refuses it.
//
// # Token feed
//
// The Store is the source of a token feed (leasestore.TokenSource, under
// the portable leasestore.Store's hub), for package fence's write-through
// pattern: grants, releases and counted crashes notify the namespace's one
// token channel with the job and its token, inside their transaction, so a
// change is delivered only if it commits, in commit order. A Store's feed
// is one connection listening on that channel and on a heartbeat channel
// of its own; SyncTokens notifies the latter and waits for it to come back.
// A lease that expires without anyone counting its crash, or a TRUNCATE,
// publishes nothing. Behind PgBouncer in transaction pooling, the first
// WatchTokens fails, naming PgBouncer, since no notification would ever
// reach it.
//
// # Start-up cost, and why only pgconn
//
// Every leasectl process, the watchdog included, pays the package init of
// every linked driver. Measured with GODEBUG=inittrace=1 over `leasectl
// version` on a 2-core machine under a load of 5 to 9: linking this
// package adds 15 packages, 0.09 ms of init by the least times of
// internal/initbudget's check (0.554 ms against the recorded 0.461 ms, a
// budget of 0.3 ms more), 0.17 ms by medians of 41 runs. The largest are
// pgconn's own dependencies: pgpassfile's regexp (0.04 ms by medians),
// golang.org/x/text's SASLprep tables for SCRAM (0.09 ms), encoding/xml
// through pgtype (0.01 ms). pgx v5.12 no longer builds pgtype's default
// type map at init, so linking all of pgx costs the same at init; but
// pgx.Connect builds that map on first use, 0.3 to 0.5 ms in every process.
// So the store uses pgconn alone: arguments travel as text, each function
// answers one JSON value, and no type map is ever built.
//
// A run's connection is the larger cost: PostgreSQL starts a backend per
// connection, SCRAM authentication costs the client a PBKDF2, and a fresh
// backend loads plpgsql and plans each function on its first call. `make
// bench` measured `leasectl run -- true` at 2.2 times Redis over TCP with
// SCRAM, 1.8 times over the Unix socket, and 1.25 times through PgBouncer
// (transaction pooling, warm sessions), against the target of 1.5. Setting
// shared_preload_libraries = 'plpgsql' on the server saves each new
// backend about 1 ms more. With sslmode=prefer, libpq's default, the store
// asks for TLS on the connection it goes on with, as libpq does, rather
// than on a connection of its own that a server without TLS refuses
// (tlsprefer.go). docs/postgres.md says where a run's time goes.
package pgstore

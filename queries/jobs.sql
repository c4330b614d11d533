-- name: GetJob :one
SELECT * FROM pgtask.jobs WHERE id = @id;

-- name: CancelJob :one
SELECT pgtask.cancel_job(@id) AS cancelled;

-- name: RetryJob :one
SELECT pgtask.retry_job(@id) AS retried;

-- name: GetGroup :one
SELECT * FROM pgtask.queue_groups WHERE queue = @queue AND group_key = @group_key;

-- name: AdvisoryLock :exec
-- Session-level lock used by tools (test database setup) to serialise work
-- across processes.
SELECT pg_advisory_lock(@key::bigint);

-- name: AdvisoryLockShared :exec
SELECT pg_advisory_lock_shared(@key::bigint);

-- name: AdvisoryUnlock :exec
SELECT pg_advisory_unlock(@key::bigint);

-- name: AdvisoryUnlockShared :exec
SELECT pg_advisory_unlock_shared(@key::bigint);

-- name: DatabaseExists :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = @name) AS exists;

-- name: CountJobs :many
-- Jobs per queue and status.
SELECT queue, status, count(*)::bigint AS jobs
  FROM pgtask.jobs
 GROUP BY queue, status
 ORDER BY queue, status;

-- name: ListJobs :many
-- A queue's jobs in id order, for inspection and tests.
SELECT * FROM pgtask.jobs WHERE queue = @queue ORDER BY id;

-- name: AnalyzeJobs :exec
-- Refreshes the planner's statistics after a bulk load (benchmarks, imports).
ANALYZE pgtask.jobs;

-- name: CountListeners :one
-- Sessions of this database waiting for pgtask's notifications.
SELECT count(*)::bigint AS listeners
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND state = 'idle'
   AND position('LISTEN pgtask' in query) > 0;

-- name: TransactionIsolation :one
-- The isolation level of the current transaction, as SHOW prints it.
SELECT current_setting('transaction_isolation')::text AS level;

-- name: BackendExists :one
-- Whether a server process with this PID is still there (tests wait for a
-- terminated session to be gone; the chaos producer for a cut-off commit's).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = @pid::integer) AS present;

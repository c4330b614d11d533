-- name: LockMigrations :exec
-- Serialises concurrent migrators (several workers starting at once).
SELECT pg_advisory_xact_lock(hashtext('pgtask.migrate')::bigint);

-- name: AppliedMigrations :many
SELECT version, name FROM pgtask.migrations ORDER BY version;

-- name: RecordMigration :exec
INSERT INTO pgtask.migrations (version, name) VALUES (@version, @name);

-- name: AppliedFunctionFiles :many
-- The revision of each function file the database runs (see schema/functions).
SELECT name, revision FROM pgtask.function_files ORDER BY name;

-- name: RecordFunctionFile :exec
INSERT INTO pgtask.function_files (name, revision, sha256) VALUES (@name, @revision, @sha256)
ON CONFLICT (name) DO UPDATE
   SET revision = excluded.revision, sha256 = excluded.sha256, applied_at = now();

-- name: SetMigrationLockTimeout :exec
-- Bounds, for the rest of the migration's transaction, how long each of its
-- statements waits for a table lock: an ALTER TABLE waiting behind a long
-- transaction would hold up every enqueue and claim queued behind it.
SELECT set_config('lock_timeout', @timeout::text, true);

-- name: PgtaskLockHolders :many
-- Other sessions holding locks on pgtask's tables, oldest transaction first:
-- what a migration that could not take its locks waited for.
SELECT a.pid::integer AS pid, coalesce(a.state, '')::text AS state,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8 AS transaction_seconds
  FROM pg_catalog.pg_stat_activity a
 WHERE a.pid <> pg_backend_pid()
   AND a.pid IN (SELECT l.pid FROM pg_catalog.pg_locks l
                   JOIN pg_catalog.pg_class c ON c.oid = l.relation
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE l.granted AND n.nspname = 'pgtask')
 ORDER BY a.xact_start NULLS LAST
 LIMIT 5;

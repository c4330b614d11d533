-- name: LockMigrations :exec
-- Serialises concurrent migrators (several workers starting at once).
SELECT pg_advisory_xact_lock(hashtext('pgtask.migrate')::bigint);

-- name: AppliedMigrations :many
SELECT version FROM pgtask.migrations ORDER BY version;

-- name: RecordMigration :exec
INSERT INTO pgtask.migrations (version, name) VALUES (@version, @name);

-- name: AppliedFunctionFiles :many
-- The revision of each function file the database runs (see schema/functions).
SELECT name, revision FROM pgtask.function_files ORDER BY name;

-- name: RecordFunctionFile :exec
INSERT INTO pgtask.function_files (name, revision, sha256) VALUES (@name, @revision, @sha256)
ON CONFLICT (name) DO UPDATE
   SET revision = excluded.revision, sha256 = excluded.sha256, applied_at = now();

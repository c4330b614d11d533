-- name: LockMigrations :exec
-- Serialises concurrent migrators (several workers starting at once).
SELECT pg_advisory_xact_lock(hashtext('pgtask.migrate')::bigint);

-- name: AppliedMigrations :many
SELECT version FROM pgtask.migrations ORDER BY version;

-- name: RecordMigration :exec
INSERT INTO pgtask.migrations (version, name) VALUES (@version, @name);

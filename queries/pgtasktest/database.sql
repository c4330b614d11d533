-- Queries of the test harness (runtime/pgtasktest), generated into its
-- internal package harnessdb. They run on the test server's maintenance
-- database, not in a pgtask schema.

-- name: AdvisoryLock :exec
-- Session-level lock that serialises building the template database across
-- test processes.
SELECT pg_advisory_lock(@key::bigint);

-- name: AdvisoryLockShared :exec
-- Held while a database is copied from the template.
SELECT pg_advisory_lock_shared(@key::bigint);

-- name: AdvisoryUnlock :exec
SELECT pg_advisory_unlock(@key::bigint);

-- name: AdvisoryUnlockShared :exec
SELECT pg_advisory_unlock_shared(@key::bigint);

-- name: DatabaseExists :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = @name) AS exists;

-- name: HoldTemplate :exec
-- Held, shared, by every test process that uses the template name, on a
-- connection kept open for as long as the process runs: a template nobody
-- holds is stale.
SELECT pg_advisory_lock_shared(@class::int, hashtext(@name::text));

-- name: TryLockTemplate :one
-- Taken while a stale template is dropped; false while a process holds it.
SELECT pg_try_advisory_lock(@class::int, hashtext(@name::text)) AS free;

-- name: UnlockTemplate :exec
SELECT pg_advisory_unlock(@class::int, hashtext(@name::text));

-- name: PgtaskTemplates :many
-- The templates test processes made (they mark theirs IS_TEMPLATE).
SELECT datname::text AS name FROM pg_catalog.pg_database
WHERE datistemplate AND datname LIKE 'pgtask\_template\_%'
ORDER BY datname;

-- name: MayCreateDatabases :one
-- Whether the session's role may create databases, which the servers
-- Discover returns must allow.
SELECT (rolsuper OR rolcreatedb)::boolean AS may
  FROM pg_catalog.pg_roles
 WHERE rolname = current_user;

-- name: DataDirectory :one
-- The server's data directory, which tells a server a Cluster started from
-- another that took its port.
SELECT current_setting('data_directory')::text AS data_directory;

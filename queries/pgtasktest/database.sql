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

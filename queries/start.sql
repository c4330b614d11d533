-- What a worker checks before it starts: that the database has pgtask's
-- schema, as new as the worker's code, and room for the worker's connections.

-- name: SchemaTables :one
-- Which of the migration runner's record tables exist (none: the schema was
-- never migrated; no function_files: migrated by a release before 0002).
SELECT (to_regclass('pgtask.migrations') IS NOT NULL)::boolean AS migrations,
       (to_regclass('pgtask.function_files') IS NOT NULL)::boolean AS function_files;

-- name: ConnectionCapacity :one
-- The server's connection limits as they apply to the current role, and how
-- many client connections are open now.
SELECT current_setting('max_connections')::integer AS max_connections,
       (SELECT CASE WHEN r.rolsuper THEN 0
                    ELSE current_setting('superuser_reserved_connections')::integer END
          FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) AS reserved,
       -- A role without pg_read_all_stats sees other roles' sessions with
       -- their backend_type hidden (NULL) but their role shown; the
       -- server's own processes have no role. (The logical replication
       -- launcher is then counted too: one too many, on the safe side.)
       (SELECT count(*)::integer FROM pg_catalog.pg_stat_activity
         WHERE backend_type = 'client backend' OR (backend_type IS NULL AND usesysid IS NOT NULL)) AS in_use;

-- name: DefaultIsolation :one
-- The isolation level a session's transactions get unless they ask: a pool
-- the application lends the worker must give READ COMMITTED.
SELECT current_setting('default_transaction_isolation')::text AS isolation;

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
       (SELECT count(*)::integer FROM pg_catalog.pg_stat_activity
         WHERE backend_type = 'client backend') AS in_use;

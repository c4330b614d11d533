-- From here on migrations hold tables, indexes and the few definitions that
-- must never change in place; pgtask's functions live in schema/functions/,
-- one current file per topic, applied with CREATE OR REPLACE whenever a
-- file's revision rises (see runtime.Migrate). The function bodies created by
-- 0001 are replaced by those files on the first migration that applies them.

-- Which revision of each function file the database runs. A worker applies
-- a file only when its own copy has a higher revision, so an older worker
-- starting during a rolling deploy never puts older bodies back.
CREATE TABLE pgtask.function_files (
    name       text PRIMARY KEY,
    revision   integer NOT NULL CHECK (revision >= 1),
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The predicates that decide which jobs an index holds. Each has one home
-- here, used both by its index and by the queries that must match the index
-- (IMMUTABLE SQL functions are inlined by the planner, in the index's
-- predicate and in a query alike, so the two are proven equal). Replacing
-- one in place would silently make its indexes wrong: a change is a new
-- function and new indexes, in a new migration.

-- A job that still has to run: waiting for its time, runnable, or running.
-- A group's unfinished jobs.
CREATE FUNCTION pgtask.job_pending(status pgtask.job_status) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status IN ('scheduled', 'queued', 'started') $$;

-- A job that failed for good and stops its group until an operator retries
-- or cancels it.
CREATE FUNCTION pgtask.job_blocks_group(status pgtask.job_status, fail_blocks_group boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status = 'failed' AND fail_blocks_group $$;

-- A job that is finished in a way that lets its group move on to its next
-- job. A head for which this holds is waiting for its group to be advanced.
CREATE FUNCTION pgtask.job_releases_group(status pgtask.job_status, fail_blocks_group boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status IN ('succeeded', 'cancelled') OR (status = 'failed' AND NOT fail_blocks_group) $$;

-- The advisory lock class of worker locks ('pgta'): every session of a
-- worker process holds (class, worker id) shared while it lives, and a
-- rescuer that can take it exclusively knows the process is gone. Live
-- workers hold locks of this class, so it never changes.
CREATE FUNCTION pgtask.worker_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828193 $$;

-- The indexes of 0001 again, defined by the predicates above.
DROP INDEX pgtask.jobs_group_pending;
CREATE INDEX jobs_group_pending ON pgtask.jobs (group_id, id)
    WHERE group_id IS NOT NULL AND pgtask.job_pending(status);

DROP INDEX pgtask.jobs_group_blocked;
CREATE INDEX jobs_group_blocked ON pgtask.jobs (queue, group_key, id)
    WHERE group_key IS NOT NULL AND pgtask.job_blocks_group(status, fail_blocks_group);

DROP INDEX pgtask.jobs_finished_heads;
CREATE INDEX jobs_finished_heads ON pgtask.jobs (queue, group_key)
    WHERE is_head AND group_key IS NOT NULL AND pgtask.job_releases_group(status, fail_blocks_group);

-- Queries of the helpers users' tests call (runtime/pgtasktest/jobs.go), on
-- a database with pgtask's schema.

-- name: WaitingJobs :many
-- The jobs of a kind that are waiting to run (queued or scheduled), in
-- enqueue order.
SELECT id, queue, coalesce(group_key, '')::text AS group_key, status::text AS status, payload
  FROM pgtask.jobs
 WHERE kind = @kind AND status IN ('scheduled', 'queued')
 ORDER BY id;

-- name: AddCounters :exec
INSERT INTO pgtask_bench.counters (id)
SELECT generate_series(1, @clients::integer)
ON CONFLICT (id) DO NOTHING;

-- name: BumpCounter :exec
-- One single-row UPDATE transaction of the floor.
UPDATE pgtask_bench.counters SET n = n + 1 WHERE id = @id;

-- name: AnalyzeJobs :exec
-- Refreshes the planner's statistics after a backlog is loaded, so that the
-- measures after it see plans a long-running server would have.
ANALYZE pgtask.jobs;

-- name: JobsByStatus :many
-- A queue's jobs per status, to tell when a drain is done.
SELECT status::text AS status, count(*)::bigint AS jobs
  FROM pgtask.jobs
 WHERE queue = @queue
 GROUP BY status
 ORDER BY status;

-- name: PinHorizon :one
-- Run in a transaction left open: takes a transaction id, which holds back
-- the xmin horizon of the whole server, as any long transaction of an
-- application does, so vacuum and index cleanup cannot remove what dies
-- meanwhile.
SELECT txid_current()::bigint AS xid;

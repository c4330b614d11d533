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

-- name: InsertFinishedJobs :exec
-- Loads n succeeded no-op jobs of queue "bench" that finished at
-- @finished_at: the table of an application that keeps its finished jobs.
INSERT INTO pgtask.jobs (queue, kind, is_head, status, payload, attempts, max_attempts,
                         run_after, created_at, started_at, finished_at)
SELECT 'bench', 'bench_noop', true, 'succeeded', jsonb_build_object('n', i), 1, 20,
       @finished_at::timestamptz, @finished_at::timestamptz, @finished_at::timestamptz, @finished_at::timestamptz
  FROM generate_series(1, @n::integer) AS i;

-- name: VacuumJobs :exec
-- What autovacuum would have done to a table loaded long ago: its
-- visibility map set and its statistics current.
VACUUM (ANALYZE) pgtask.jobs;

-- name: UnfinishedUngrouped :one
-- A queue's unfinished jobs when none is grouped, counted through the
-- claim, scheduled and started indexes, so the count costs the same however
-- many finished jobs the table keeps.
SELECT ((SELECT count(*) FROM pgtask.jobs q WHERE q.queue = @queue::text AND q.status = 'queued' AND q.is_head)
      + (SELECT count(*) FROM pgtask.jobs s WHERE s.status = 'scheduled')
      + (SELECT count(*) FROM pgtask.jobs r WHERE r.status = 'started'))::bigint AS jobs;

-- name: CountFinishedBefore :one
-- Succeeded jobs that finished before @before (through the index retention
-- deletes by).
SELECT count(*)::bigint AS jobs
  FROM pgtask.jobs
 WHERE status = 'succeeded' AND finished_at < @before::timestamptz;

-- name: InsertDashboardHistory :exec
-- The dashboard measure's history: @n finished jobs over four queues and
-- five kinds, finished evenly over the @span_seconds before now, in id
-- order, one in 50 failed with an error and one in 97 cancelled. They are
-- written straight into the table, as working them would take minutes;
-- finished ungrouped jobs need nothing else.
INSERT INTO pgtask.jobs (queue, kind, is_head, status, payload, attempts, max_attempts, errors,
                         run_after, created_at, started_at, finished_at)
SELECT (ARRAY['default', 'emails', 'reports', 'webhooks'])[1 + i % 4], 'kind' || (i % 5), false,
       (CASE WHEN i % 50 = 0 THEN 'failed' WHEN i % 97 = 0 THEN 'cancelled' ELSE 'succeeded' END)::pgtask.job_status,
       jsonb_build_object('n', i), 1, 20,
       CASE WHEN i % 50 = 0
            THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'error', 'upstream timed out', 'at', now()))
            ELSE '[]'::jsonb END,
       t.at - interval '2 seconds', t.at - interval '2 seconds', t.at - interval '50 milliseconds', t.at
  FROM (SELECT @n::integer AS n, @span_seconds::float8 AS span) p
 CROSS JOIN LATERAL generate_series(1, p.n) AS i
 CROSS JOIN LATERAL (SELECT now() - (p.n - i) * (p.span / p.n) * interval '1 second' AS at) t;

-- name: SucceededAmong :many
-- Which of the jobs @ids another session sees succeeded: the latency
-- measures poll it to time when a success's commit becomes visible.
SELECT id FROM pgtask.jobs WHERE id = ANY (@ids::bigint[]) AND status::text = 'succeeded';

-- name: ClaimIndexReads :one
-- How often the claim index was scanned and how many of its entries those
-- scans read, dead ones included, since the server started (as far as the
-- statistics have been flushed): read per scan, the cost of stepping over
-- what claims left behind.
SELECT pg_stat_get_numscans('pgtask.jobs_claim'::regclass)::bigint AS scans,
       pg_stat_get_tuples_returned('pgtask.jobs_claim'::regclass)::bigint AS entries;

-- name: StartTimes :many
-- When each attempt of the jobs of @queue began (the claim that started
-- it), in order: what the rate benchmark counts starts by.
SELECT started_at::timestamptz AS started_at FROM pgtask.jobs
 WHERE queue = @queue::text AND started_at IS NOT NULL
 ORDER BY started_at;

-- name: FinishTimes :many
-- When each job of @queue finished, by id: the workflow chain's steps.
SELECT id, finished_at::timestamptz AS finished_at FROM pgtask.jobs
 WHERE queue = @queue::text AND finished_at IS NOT NULL
 ORDER BY id;

-- The kinds workers handle, and the runnable jobs of kinds no live worker
-- handles (see the worker_kinds table).

-- name: RecordWorkerKinds :exec
-- Records the kinds the worker has handlers for in each queue it serves,
-- when it starts; drops the rows of workers that are gone.
SELECT pgtask.record_worker_kinds(@worker_id::integer, @queues::text[], @kinds::text[]);

-- name: UnhandledKinds :many
-- Per queue and kind with runnable jobs (queued heads) that no live worker
-- has recorded handling in that queue: how many, and how long the oldest
-- has waited.
SELECT j.queue::text AS queue, j.kind::text AS kind, count(*)::bigint AS jobs,
       extract(epoch FROM clock_timestamp() - min(j.run_after))::float8 AS oldest_wait_seconds
  FROM pgtask.jobs j
 WHERE j.status = 'queued' AND j.is_head
   AND NOT EXISTS (SELECT 1 FROM pgtask.worker_kinds w
                    WHERE w.queue = j.queue AND w.kind = j.kind
                      AND w.worker_id IN (SELECT l.worker_id FROM pgtask.live_workers() l))
 GROUP BY j.queue, j.kind
 ORDER BY j.queue, j.kind;

-- name: DashboardUnhandledKinds :many
-- Per queue of @queues: the kinds among its next 100 runnable jobs in line
-- (along the claim index, so the cost is bounded) that no live worker has
-- recorded handling in that queue, with how many of those jobs they have.
WITH live AS MATERIALIZED (
    SELECT w.queue, w.kind FROM pgtask.worker_kinds w
     WHERE w.worker_id IN (SELECT l.worker_id FROM pgtask.live_workers() l)
)
SELECT q.queue::text AS queue, n.kind::text AS kind, count(*)::bigint AS jobs
  FROM unnest(@queues::text[]) AS q(queue)
  CROSS JOIN LATERAL (
       SELECT j.kind FROM pgtask.jobs j
        WHERE j.queue = q.queue AND j.status = 'queued' AND j.is_head
        ORDER BY j.priority, j.id
        LIMIT 100) n
 WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.queue = q.queue AND l.kind = n.kind)
 GROUP BY q.queue, n.kind
 ORDER BY 1, 2;

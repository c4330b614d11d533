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

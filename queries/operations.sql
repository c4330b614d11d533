-- name: Elect :one
-- Elects the worker to a cluster-wide duty or renews its term (see
-- pgtask.elect).
SELECT pgtask.elect(@duty, @worker_id::integer, @term_ms::integer) AS leader;

-- name: Resign :exec
SELECT pgtask.resign(@duty, @worker_id::integer);

-- name: PauseQueue :one
SELECT pgtask.pause_queue(@queue) AS paused;

-- name: ResumeQueue :one
SELECT pgtask.resume_queue(@queue) AS resumed;

-- name: PausedQueues :many
SELECT queue, paused_at FROM pgtask.paused_queues ORDER BY queue;

-- name: DeleteFinishedJobs :one
-- Retention's batch: finished jobs of a status past an age (see
-- pgtask.delete_finished_jobs).
SELECT pgtask.delete_finished_jobs(@status::pgtask.job_status, @older_than_ms::bigint, @max::integer) AS deleted;

-- name: LastPeriodicTicks :many
-- The latest tick enqueued of each periodic job (the epoch for none yet),
-- and the database's clock.
SELECT n.name::text AS name, coalesce(t.tick_at, 'epoch')::timestamptz AS last_tick, clock_timestamp()::timestamptz AS now
  FROM unnest(@names::text[]) AS n(name)
  LEFT JOIN LATERAL (SELECT max(p.tick_at) AS tick_at FROM pgtask.periodic_ticks p WHERE p.name = n.name) t ON true;

-- name: TakePeriodicTick :one
SELECT pgtask.take_periodic_tick(@name, @tick_at::timestamptz, @keep_after::timestamptz) AS taken;

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

-- name: SetLimit :one
-- Sets (max_running) or clears (NULL) an operator's concurrency limit for a
-- key of a queue, or for every key of it but the queue's own (limit_key
-- NULL); see pgtask.set_limit.
SELECT pgtask.set_limit(@queue::text, sqlc.narg(limit_key)::text, sqlc.narg(max_running)::integer)::integer AS changed;

-- name: ListLimits :many
-- Each key of a queue (all queues for an empty one) that has a limit, with
-- its limit, the override in force if any, and its admitted, running and
-- waiting jobs now.
SELECT k.queue, k.limit_key, k.declared, k.max_running, k.free,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.limit_id = k.id AND j.is_head AND j.status = 'started')::bigint AS running,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head)::bigint AS waiting,
       EXISTS (SELECT 1 FROM pgtask.limit_overrides o
                WHERE o.queue = k.queue AND (o.limit_key = k.limit_key OR (o.limit_key IS NULL AND k.limit_key <> '')))::boolean AS overridden
  FROM pgtask.limit_keys k
 WHERE @queue::text = '' OR k.queue = @queue::text
 ORDER BY k.queue, k.limit_key
 LIMIT @max_rows::integer;

-- name: ListLimitOverrides :many
-- The operators' limits, by queue and key (NULL: every key of the queue).
SELECT o.queue, o.limit_key, o.max_running, o.set_at
  FROM pgtask.limit_overrides o
 ORDER BY o.queue, o.limit_key NULLS FIRST;

-- name: SetRate :one
-- Sets (rate jobs per period_us, bursts of burst; NULL burst: the default)
-- or clears (NULL rate) an operator's rate for a key of a queue; see
-- pgtask.set_rate.
SELECT pgtask.set_rate(@queue::text, @rate_key::text, sqlc.narg(rate)::integer, sqlc.narg(period_us)::bigint,
                       sqlc.narg(burst)::integer)::integer AS changed;

-- name: ListRates :many
-- Each rate key of a queue (all queues for an empty one), with its rate in
-- force and declared, whether an operator's override is in force, its
-- tokens now, when its next token is due while jobs wait, and its waiting
-- jobs now.
SELECT k.queue, k.rate_key, k.rate, k.period_us, k.burst, k.declared_rate, k.declared_period_us, k.declared_burst,
       pgtask.rate_tokens(k, clock_timestamp())::double precision AS tokens, k.ready_at,
       (SELECT count(*) FROM pgtask.jobs j WHERE j.rate_id = k.id AND j.status = 'queued')::bigint AS waiting,
       EXISTS (SELECT 1 FROM pgtask.rate_overrides o
                WHERE o.queue = k.queue AND o.rate_key = k.rate_key)::boolean AS overridden
  FROM pgtask.rate_keys k
 WHERE @queue::text = '' OR k.queue = @queue::text
 ORDER BY k.queue, k.rate_key
 LIMIT @max_rows::integer;

-- name: GetJobLimit :one
-- The concurrency limit job @id counts against, and whether the job holds
-- one of its key's slots (admitted: queued to run, or running) or waits for
-- one; no row for a job without a limit (or no job).
SELECT k.queue, k.limit_key, k.max_running,
       (j.is_head AND j.status IN ('queued', 'started'))::boolean AS admitted,
       (NOT j.is_head AND j.status = 'queued')::boolean AS waiting
  FROM pgtask.jobs j
  JOIN pgtask.limit_keys k ON k.id = j.limit_id
 WHERE j.id = @id;

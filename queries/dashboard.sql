-- What the web dashboard (runtime/dashboard) reads. Each statement's cost is
-- bounded whatever the size of the jobs table: it walks an index for at most
-- a given number of entries (@probe, @scan, @max) and never counts a whole
-- status. Where a bound was reached the dashboard says so ("10,000+").

-- name: DashboardQueueNames :many
-- The queues with runnable jobs, with groups, with jobs waiting on a rate
-- (a rate-limited job is never runnable in the claim index's sense) or
-- paused. The claim index and the groups' primary key both start with the
-- queue: each is skipped through one queue at a time (a probe per queue, not
-- a scan of the rows); the rate keys with jobs waiting are read from their
-- own small index.
WITH RECURSIVE runnable(queue) AS (
    (SELECT j.queue FROM pgtask.jobs j WHERE j.status = 'queued' AND j.is_head ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM pgtask.jobs j
             WHERE j.status = 'queued' AND j.is_head AND j.queue > r.queue
             ORDER BY j.queue LIMIT 1)
      FROM runnable r WHERE r.queue IS NOT NULL
), grouped(queue) AS (
    (SELECT g.queue FROM pgtask.queue_groups g ORDER BY g.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT g.queue FROM pgtask.queue_groups g WHERE g.queue > r.queue ORDER BY g.queue LIMIT 1)
      FROM grouped r WHERE r.queue IS NOT NULL
)
SELECT n.queue::text AS queue FROM (
    SELECT runnable.queue FROM runnable
    UNION SELECT grouped.queue FROM grouped
    UNION SELECT k.queue FROM pgtask.rate_keys k WHERE k.ready_at IS NOT NULL
    UNION SELECT p.queue FROM pgtask.paused_queues p
) n
 WHERE n.queue IS NOT NULL
 ORDER BY 1;

-- name: DashboardQueueLines :many
-- Per queue: its runnable jobs (queued heads, counted along the claim index
-- up to @probe); how long the longest-waiting of the next 100 in line has
-- waited; its groups' unfinished jobs, walked along the groups' index up to
-- @probe of them, and how many of those wait behind their group's head; the
-- jobs waiting on a concurrency limit (key by key, along the index of
-- waiting limited jobs, up to @probe); the groups a failure blocks (up to
-- @probe); and since when it is paused.
SELECT q.queue::text AS queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.jobs j
             WHERE j.queue = q.queue AND j.status = 'queued' AND j.is_head
             LIMIT @probe::integer) h)::bigint AS runnable,
       coalesce((SELECT extract(epoch FROM clock_timestamp() - min(f.run_after)) FROM (
            SELECT j.run_after FROM pgtask.jobs j
             WHERE j.queue = q.queue AND j.status = 'queued' AND j.is_head
             ORDER BY j.priority, j.id
             LIMIT 100) f), 0)::float8 AS oldest_wait_seconds,
       w.walked::bigint AS group_jobs_walked,
       w.waiting::bigint AS waiting,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.limit_keys k
              JOIN pgtask.jobs j ON j.limit_id = k.id
             WHERE k.queue = q.queue AND j.limit_id IS NOT NULL AND j.status = 'queued' AND NOT j.is_head
             LIMIT @probe::integer) l)::bigint AS on_limit,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.rate_keys k
              JOIN pgtask.jobs j ON j.rate_id = k.id
             WHERE k.queue = q.queue AND j.rate_id IS NOT NULL AND j.status = 'queued'
             LIMIT @probe::integer) r)::bigint AS on_rate,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.jobs j
             WHERE j.queue = q.queue AND j.group_key IS NOT NULL AND j.status = 'failed' AND j.fail_blocks_group
               AND j.is_head
             LIMIT @probe::integer) b)::bigint AS blocked_groups,
       p.paused_at
  FROM unnest(@queues::text[]) AS q(queue)
  CROSS JOIN LATERAL (
       SELECT count(*) AS walked, count(*) FILTER (WHERE NOT s.is_head) AS waiting
         FROM (SELECT j.id, j.is_head FROM pgtask.queue_groups g
                 JOIN pgtask.jobs j ON j.group_id = g.id
                WHERE g.queue = q.queue AND j.group_id IS NOT NULL
                  AND j.status IN ('scheduled', 'queued', 'started')
                LIMIT @probe::integer) s) w
  LEFT JOIN pgtask.paused_queues p ON p.queue = q.queue
 ORDER BY 1;

-- name: DashboardWaitingSample :many
-- The scheduled jobs due first and the running jobs, up to @probe of
-- each, by queue: their index holds no queue, so a count per queue is
-- exact only when fewer than @probe of the status exist.
SELECT s.queue::text AS queue, s.status::text AS status, count(*)::bigint AS jobs
  FROM ((SELECT j.queue, j.status FROM pgtask.jobs j
          WHERE j.status = 'scheduled' ORDER BY j.run_after LIMIT @probe::integer)
        UNION ALL
        (SELECT j.queue, j.status FROM pgtask.jobs j
          WHERE j.status = 'started' LIMIT @probe::integer)) s
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- name: DashboardFinishedSample :many
-- Jobs finished in the last hour, up to the latest @probe of each
-- finished status, by queue and by minute: how many finished 0 to 1 minute
-- ago (minutes_ago 0), 1 to 2 (1), and so on to 59, and the earliest
-- finish among them (how far back a sample that hit the bound reaches).
-- The queues page adds the minutes up for its counts and draws them.
SELECT s.queue::text AS queue, s.status::text AS status,
       least(greatest(floor(date_part('epoch', now() - s.finished_at) / 60), 0), 59)::integer AS minutes_ago,
       count(*)::bigint AS jobs,
       min(s.finished_at)::timestamptz AS earliest,
       now()::timestamptz AS now
  FROM ((SELECT j.queue, j.status, j.finished_at FROM pgtask.jobs j
          WHERE j.status = 'succeeded' AND j.finished_at > now() - interval '1 hour'
          ORDER BY j.finished_at DESC LIMIT @probe::integer)
        UNION ALL
        (SELECT j.queue, j.status, j.finished_at FROM pgtask.jobs j
          WHERE j.status = 'failed' AND j.finished_at > now() - interval '1 hour'
          ORDER BY j.finished_at DESC LIMIT @probe::integer)
        UNION ALL
        (SELECT j.queue, j.status, j.finished_at FROM pgtask.jobs j
          WHERE j.status = 'cancelled' AND j.finished_at > now() - interval '1 hour'
          ORDER BY j.finished_at DESC LIMIT @probe::integer)) s
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3;

-- The jobs page reads one of three orders, each along an index, and looks
-- through a bounded stretch of it per page: first the job that ends the
-- stretch (@scan entries on, stepped over in the index), then the stretch,
-- that job included, with the filters applied. A page with fewer matches
-- than asked for says how far it looked, and the next page goes on after
-- that job.

-- name: DashboardJobsScanEndByID :one
-- The id @scan jobs on below @before_id, newest first; no row when no job
-- is that far on.
SELECT j.id AS scan_end FROM pgtask.jobs j
 WHERE j.id < @before_id::bigint
 ORDER BY j.id DESC OFFSET @scan::integer LIMIT 1;

-- name: DashboardJobsByID :many
-- Newest first: the jobs the filters match with ids below @before_id, down
-- to @scan_end.
SELECT j.id, j.queue, j.kind, j.group_key, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_after, j.created_at, j.started_at, j.finished_at, coalesce(j.errors -> -1 ->> 'error', '')::text AS last_error
  FROM pgtask.jobs j
 WHERE j.id < @before_id::bigint AND j.id >= @scan_end::bigint
   AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
   AND (sqlc.narg(kind)::text IS NULL OR j.kind = sqlc.narg(kind)::text)
   AND (sqlc.narg(group_key)::text IS NULL OR j.group_key = sqlc.narg(group_key)::text)
   AND (sqlc.narg(status)::text IS NULL OR j.status::text = sqlc.narg(status)::text)
   AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
   AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
 ORDER BY j.id DESC
 LIMIT @max::integer;

-- name: DashboardJobsScanEndByFinish :one
-- The job @scan jobs of @status on from (@before_at, @before_id), latest
-- finished first, along the index of finished jobs; no row when no job is
-- that far on.
SELECT j.finished_at::timestamptz AS end_at, j.id AS end_id FROM pgtask.jobs j
 WHERE j.status = @status::pgtask.job_status AND j.status IN ('succeeded', 'failed', 'cancelled')
   AND j.finished_at <= @before_at::timestamptz
   AND (j.finished_at, j.id) < (@before_at::timestamptz, @before_id::bigint)
 ORDER BY j.finished_at DESC, j.id DESC OFFSET @scan::integer LIMIT 1;

-- name: DashboardJobsByFinish :many
-- Latest finished first: the jobs of @status the filters match from
-- (@before_at, @before_id), excluded, to (@end_at, @end_id), included.
SELECT j.id, j.queue, j.kind, j.group_key, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_after, j.created_at, j.started_at, j.finished_at, coalesce(j.errors -> -1 ->> 'error', '')::text AS last_error
  FROM pgtask.jobs j
 WHERE j.status = @status::pgtask.job_status AND j.status IN ('succeeded', 'failed', 'cancelled')
   AND j.finished_at <= @before_at::timestamptz AND j.finished_at >= @end_at::timestamptz
   AND (j.finished_at, j.id) < (@before_at::timestamptz, @before_id::bigint)
   AND (j.finished_at, j.id) >= (@end_at::timestamptz, @end_id::bigint)
   AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
   AND (sqlc.narg(kind)::text IS NULL OR j.kind = sqlc.narg(kind)::text)
   AND (sqlc.narg(group_key)::text IS NULL OR j.group_key = sqlc.narg(group_key)::text)
   AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
   AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
 ORDER BY j.finished_at DESC, j.id DESC
 LIMIT @max::integer;

-- name: DashboardJobsScanEndByDue :one
-- The job @scan scheduled jobs on from (@after_at, @after_id), due first,
-- along the index of scheduled jobs; no row when no job is that far on.
SELECT j.run_after AS end_at, j.id AS end_id FROM pgtask.jobs j
 WHERE j.status = 'scheduled' AND j.run_after >= @after_at::timestamptz
   AND (j.run_after, j.id) > (@after_at::timestamptz, @after_id::bigint)
 ORDER BY j.run_after, j.id OFFSET @scan::integer LIMIT 1;

-- name: DashboardJobsByDue :many
-- Due first: the scheduled jobs the filters match from (@after_at,
-- @after_id), excluded, to (@end_at, @end_id), included.
SELECT j.id, j.queue, j.kind, j.group_key, j.status::text AS status, j.priority, j.attempts, j.max_attempts,
       j.run_after, j.created_at, j.started_at, j.finished_at, coalesce(j.errors -> -1 ->> 'error', '')::text AS last_error
  FROM pgtask.jobs j
 WHERE j.status = 'scheduled'
   AND j.run_after >= @after_at::timestamptz AND j.run_after <= @end_at::timestamptz
   AND (j.run_after, j.id) > (@after_at::timestamptz, @after_id::bigint)
   AND (j.run_after, j.id) <= (@end_at::timestamptz, @end_id::bigint)
   AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
   AND (sqlc.narg(kind)::text IS NULL OR j.kind = sqlc.narg(kind)::text)
   AND (sqlc.narg(group_key)::text IS NULL OR j.group_key = sqlc.narg(group_key)::text)
   AND (sqlc.narg(created_after)::timestamptz IS NULL OR j.created_at >= sqlc.narg(created_after)::timestamptz)
   AND (sqlc.narg(created_before)::timestamptz IS NULL OR j.created_at < sqlc.narg(created_before)::timestamptz)
 ORDER BY j.run_after, j.id
 LIMIT @max::integer;

-- name: DashboardBlockedGroups :many
-- Groups a failure blocks, with that failed head, in (queue, group key)
-- order after (@after_queue, @after_group), along the index of blocking
-- failures; and how many jobs wait behind each head (up to 1,001).
SELECT g.queue, g.group_key, g.id AS group_id, g.created_at AS group_since,
       j.id AS head_id, j.kind AS head_kind, j.status::text AS head_status, j.attempts AS head_attempts,
       j.max_attempts AS head_max_attempts, j.finished_at AS head_finished_at,
       coalesce(j.errors -> -1 ->> 'error', '')::text AS head_error,
       (SELECT count(*) FROM (SELECT 1 FROM pgtask.jobs p
                               WHERE p.group_id = g.id AND p.group_id IS NOT NULL
                                 AND p.status IN ('scheduled', 'queued', 'started')
                               LIMIT 1001) b)::bigint AS behind
  FROM pgtask.jobs j
  JOIN pgtask.queue_groups g ON g.queue = j.queue AND g.group_key = j.group_key
 WHERE j.group_key IS NOT NULL AND j.status = 'failed' AND j.fail_blocks_group AND j.is_head
   AND (sqlc.narg(queue)::text IS NULL OR j.queue = sqlc.narg(queue)::text)
   AND (j.queue, j.group_key) > (@after_queue::text, @after_group::text)
 ORDER BY j.queue, j.group_key
 LIMIT @max::integer;

-- name: DashboardGroups :many
-- Every group with unfinished work, with its head, in (queue, group key)
-- order after (@after_queue, @after_group), along the groups' primary key;
-- and how many of its unfinished jobs there are (up to 1,001).
SELECT g.queue, g.group_key, g.id AS group_id, g.created_at AS group_since,
       j.id AS head_id, j.kind AS head_kind, j.status::text AS head_status, j.attempts AS head_attempts,
       j.max_attempts AS head_max_attempts, j.finished_at AS head_finished_at,
       coalesce(j.errors -> -1 ->> 'error', '')::text AS head_error,
       (SELECT count(*) FROM (SELECT 1 FROM pgtask.jobs p
                               WHERE p.group_id = g.id AND p.group_id IS NOT NULL
                                 AND p.status IN ('scheduled', 'queued', 'started')
                               LIMIT 1001) b)::bigint AS unfinished
  FROM pgtask.queue_groups g
  JOIN pgtask.jobs j ON j.id = pgtask.group_head(g.queue, g.group_key, g.id)
 WHERE (sqlc.narg(queue)::text IS NULL OR g.queue = sqlc.narg(queue)::text)
   AND (g.queue, g.group_key) > (@after_queue::text, @after_group::text)
 ORDER BY g.queue, g.group_key
 LIMIT @max::integer;

-- name: DashboardLimits :many
-- A page of limit keys after (@after_queue, @after_key), of one queue or
-- all (NULL), along the keys' primary key: each with its limits and free
-- slots, and its running and waiting jobs counted up to @probe (the running
-- ones among the started jobs, the waiting ones along their own index).
SELECT k.queue, k.limit_key, k.declared, k.max_running, k.free,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.jobs j
             WHERE j.limit_id = k.id AND j.status = 'started' AND j.is_head
             LIMIT @probe::integer) r)::bigint AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM pgtask.jobs j
             WHERE j.limit_id = k.id AND j.limit_id IS NOT NULL AND j.status = 'queued' AND NOT j.is_head
             LIMIT @probe::integer) w)::bigint AS waiting,
       EXISTS (SELECT 1 FROM pgtask.limit_overrides o
                WHERE o.queue = k.queue AND (o.limit_key = k.limit_key OR (o.limit_key IS NULL AND k.limit_key <> '')))::boolean AS overridden
  FROM pgtask.limit_keys k
 WHERE (sqlc.narg(queue)::text IS NULL OR k.queue = sqlc.narg(queue)::text)
   AND (k.queue, k.limit_key) > (@after_queue::text, @after_key::text)
 ORDER BY k.queue, k.limit_key
 LIMIT @max::integer;

-- name: DashboardBatches :many
-- A page of batches before @before_id, newest first: each with the counts
-- recorded when it ended (NULL while it is open) and its callbacks' jobs.
SELECT b.id, b.total, b.created_at, b.failed_at, b.finished_at,
       b.succeeded, b.failed, b.cancelled, b.deleted,
       coalesce(b.on_finish, 0)::bigint AS on_finish, coalesce(b.on_failure, 0)::bigint AS on_failure
  FROM pgtask.batches b
 WHERE b.id < @before_id::bigint
 ORDER BY b.id DESC
 LIMIT @max::integer;

-- name: DashboardBatchJobs :many
-- A page of a batch's jobs after @after_id, by id, along the batch's index.
SELECT j.id, j.kind, j.status, j.attempts, j.max_attempts, j.finished_at
  FROM pgtask.jobs j
 WHERE j.batch_id = @batch_id::bigint AND j.id > @after_id::bigint
 ORDER BY j.id
 LIMIT @max::integer;

-- name: DashboardBatch :one
-- A batch, with the counts recorded when it ended (NULL while it is open),
-- and, while it is open, its jobs' counts now, read along the batch's index
-- for at most @scan jobs (seen says how many it read).
SELECT b.id, b.total, b.created_at, b.failed_at, b.finished_at,
       b.succeeded, b.failed, b.cancelled, b.deleted,
       coalesce(b.on_finish, 0)::bigint AS on_finish, coalesce(b.on_failure, 0)::bigint AS on_failure,
       c.succeeded::integer AS now_succeeded, c.failed::integer AS now_failed,
       c.cancelled::integer AS now_cancelled, c.seen::integer AS seen
  FROM pgtask.batches b
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE s.status = 'succeeded') AS succeeded,
              count(*) FILTER (WHERE s.status = 'failed') AS failed,
              count(*) FILTER (WHERE s.status = 'cancelled') AS cancelled,
              count(*) AS seen
         FROM (SELECT j.status FROM pgtask.jobs j
                WHERE j.batch_id = b.id AND b.finished_at IS NULL
                ORDER BY j.id
                LIMIT @scan::integer) s) c
 WHERE b.id = @id::bigint;

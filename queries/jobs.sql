-- name: GetJob :one
SELECT * FROM pgtask.jobs WHERE id = @id;

-- name: CancelJob :one
SELECT pgtask.cancel_job(@id) AS cancelled;

-- name: RetryJob :one
-- held_by: the job holding the unique key that kept this one from a retry,
-- or 0.
SELECT r.retried::boolean AS retried, coalesce(r.held_by, 0)::bigint AS held_by FROM pgtask.retry_job(@id) r;

-- name: ListJobsPage :many
-- A page of the jobs a filter matches, in id order after @after_id. Each
-- filter is skipped when NULL.
SELECT * FROM pgtask.jobs
 WHERE (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
   AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
   AND (sqlc.narg(group_key)::text IS NULL OR group_key = sqlc.narg(group_key)::text)
   AND (sqlc.narg(statuses)::text[] IS NULL OR status::text = ANY (sqlc.narg(statuses)::text[]))
   AND (sqlc.narg(created_after)::timestamptz IS NULL OR created_at >= sqlc.narg(created_after)::timestamptz)
   AND (sqlc.narg(created_before)::timestamptz IS NULL OR created_at < sqlc.narg(created_before)::timestamptz)
   AND id > @after_id::bigint
 ORDER BY id
 LIMIT @max::integer;

-- name: CountJobsWhere :one
SELECT count(*)::bigint AS jobs FROM pgtask.jobs
 WHERE (sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)::text)
   AND (sqlc.narg(kind)::text IS NULL OR kind = sqlc.narg(kind)::text)
   AND (sqlc.narg(group_key)::text IS NULL OR group_key = sqlc.narg(group_key)::text)
   AND (sqlc.narg(statuses)::text[] IS NULL OR status::text = ANY (sqlc.narg(statuses)::text[]))
   AND (sqlc.narg(created_after)::timestamptz IS NULL OR created_at >= sqlc.narg(created_after)::timestamptz)
   AND (sqlc.narg(created_before)::timestamptz IS NULL OR created_at < sqlc.narg(created_before)::timestamptz);

-- name: CancelJobs :one
SELECT pgtask.cancel_jobs(@ids::bigint[]) AS changed;

-- name: RetryJobs :one
-- not_retried: the jobs a unique key held by another (held_by, index by
-- index) kept from a retry.
SELECT r.retried::integer AS changed, r.not_retried::bigint[] AS not_retried, r.held_by::bigint[] AS held_by
  FROM pgtask.retry_jobs(@ids::bigint[]) r;

-- name: DeleteJobs :one
SELECT pgtask.delete_jobs(@ids::bigint[]) AS deleted;

-- name: QueueCounts :many
-- Jobs per queue and status.
SELECT queue, status::text AS status, count(*)::bigint AS jobs
  FROM pgtask.jobs GROUP BY queue, status ORDER BY queue, status;

-- name: QueueWaits :many
-- Per queue: how long its oldest runnable job has waited, how many of its
-- groups a failure blocks, and of its queued jobs how many wait for a
-- worker (runnable: ungrouped, a group's head, or admitted by their
-- concurrency limit), how many wait on a concurrency limit (for a free
-- slot of their key; see schema/functions/limits.sql) and how many on a
-- rate limit (for a token of their key; see schema/functions/rates.sql).
SELECT q.queue::text AS queue,
       coalesce((SELECT extract(epoch FROM clock_timestamp() - min(j.run_after))
                   FROM pgtask.jobs j WHERE j.queue = q.queue AND j.status = 'queued' AND j.is_head), 0)::float8 AS oldest_wait_seconds,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.queue = q.queue AND j.group_key IS NOT NULL AND j.status = 'failed' AND j.fail_blocks_group
           AND j.is_head)::bigint AS blocked_groups,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.queue = q.queue AND j.status = 'queued' AND j.is_head)::bigint AS runnable,
       (SELECT count(*) FROM pgtask.limit_keys k
          JOIN pgtask.jobs j ON j.limit_id = k.id
         WHERE k.queue = q.queue AND j.limit_id IS NOT NULL AND j.status = 'queued' AND NOT j.is_head)::bigint AS waiting_on_limit,
       (SELECT count(*) FROM pgtask.rate_keys k
          JOIN pgtask.jobs j ON j.rate_id = k.id
         WHERE k.queue = q.queue AND j.rate_id IS NOT NULL AND j.status = 'queued')::bigint AS waiting_on_rate
  FROM unnest(@queues::text[]) AS q(queue);

-- name: GetJobs :many
-- Jobs by id, in one round trip; an id with no job has no row.
SELECT * FROM pgtask.jobs WHERE id = ANY (@ids::bigint[]);

-- name: FinishedJobs :many
-- Which of the jobs ids have finished: succeeded, failed or cancelled. As
-- text, so that only the primary key serves (see schema/functions/work.sql).
SELECT * FROM pgtask.jobs
 WHERE id = ANY (@ids::bigint[]) AND status::text IN ('succeeded', 'failed', 'cancelled');

-- name: ListenFinished :exec
-- Finishes of jobs with results (see pgtask.settle_jobs): each
-- notification's payload is the ids of jobs that ended, joined by commas.
LISTEN pgtask_finished;

-- name: GetJobProgress :one
-- The progress the job's latest reporting attempt recorded.
SELECT * FROM pgtask.job_progress WHERE job_id = @job_id;

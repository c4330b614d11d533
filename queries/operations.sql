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

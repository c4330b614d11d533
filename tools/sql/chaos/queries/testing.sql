-- Queries of pgtask-chaos's own tests (checks_test.go): they seed a record
-- with violations, to show that each check reports them. The run never
-- uses them.

-- name: SeedJobEnd :exec
-- Ends a job as status says, as if a worker had (a workflow step's children
-- hear of it through pgtask's triggers).
UPDATE pgtask.jobs SET status = CAST(@status::text AS pgtask.job_status), finished_at = clock_timestamp()
 WHERE id = @id;

-- name: SeedJobClaimed :exec
-- Stamps a job as claimed now for one more attempt (started_at is when the
-- claim of its last attempt began), leaving its status as it is.
UPDATE pgtask.jobs SET started_at = clock_timestamp(), attempts = attempts + 1 WHERE id = @id;

-- name: SeedJobError :exec
-- Adds an entry to a job's error history, for its last attempt, as a
-- worker records a failed attempt.
UPDATE pgtask.jobs
   SET errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', clock_timestamp(), 'error', @error::text))
 WHERE id = @id;

-- name: SeedAttemptAt :exec
-- An attempt of a job whose handler started and ended at the given time.
INSERT INTO pgtask_chaos.attempts (id, job_id, attempt, instance, worker_pid, mode, backend_pid, started_at, ended_at, outcome)
VALUES (@id, @job_id, 1, 0, 0, 'held', 0, @started_at, @started_at, 'ok');

-- name: SeedFinishBatches :one
-- One maintenance round of the batches, as a worker's would: ends each
-- batch whose jobs have all finished and releases or cancels its
-- callbacks. Returns how many batches it ended.
SELECT coalesce(f.finished, 0)::integer AS finished FROM pgtask.finish_batches(0, 1000) f;

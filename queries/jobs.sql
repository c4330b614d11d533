-- name: GetJob :one
SELECT * FROM pgtask.jobs WHERE id = @id;

-- name: CancelJob :one
SELECT pgtask.cancel_job(@id) AS cancelled;

-- name: RetryJob :one
SELECT pgtask.retry_job(@id) AS retried;

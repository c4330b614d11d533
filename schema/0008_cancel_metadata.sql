-- Cancelling running jobs, and metadata that travels with a job.

-- A request to cancel a running attempt. A held-mode job's row is locked by
-- its worker for the whole attempt, so the request cannot be written there
-- without waiting for the attempt to end: it gets a row of its own (and no
-- foreign key, whose check would wait for that lock too). The worker
-- running the attempt cancels its handler's context; when the attempt then
-- fails, or its worker is lost, the job ends cancelled instead of being
-- retried (see fail_job). Requests whose attempt is over are pruned.
CREATE TABLE pgtask.cancel_requests (
    job_id       bigint PRIMARY KEY,
    attempt      integer NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now()
);

-- Metadata: string keys and values the application attaches at enqueue
-- (a trace context, a tenant, a request id) and reads in the handler, kept
-- apart from the payload that the task's type declares. NULL for none.
-- The constraint is NOT VALID: the new column is empty, and validating it
-- would scan the table under the migration's lock.
ALTER TABLE pgtask.jobs
    ADD COLUMN metadata jsonb,
    ADD CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object') NOT VALID;

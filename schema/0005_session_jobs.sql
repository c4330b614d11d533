-- The started jobs of each database session, so a job transaction can lock
-- the jobs its session claimed without being told their ids: the worker then
-- sends the claim's commit, the next transaction's begin and that lock in one
-- round trip (see hold_session_jobs in functions/work.sql). Only started
-- jobs are in it, so it stays as small as the number of running jobs.
CREATE INDEX jobs_started_session ON pgtask.jobs (owner_pid, worker_id)
    WHERE status = 'started';

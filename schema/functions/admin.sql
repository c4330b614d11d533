-- revision: 2
-- An operator's changes to single jobs: cancel and retry.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Locks job p_id for an operator's change, if its status is one of
-- p_statuses, and returns it (NULL otherwise). A grouped job's group row is
-- locked first, the order advancing uses; the status is checked before
-- locking, so a running job is refused without waiting for it, and again
-- after, since it may have moved on meanwhile.
CREATE OR REPLACE FUNCTION pgtask.lock_job_for_change(p_id bigint, p_statuses pgtask.job_status[]) RETURNS pgtask.jobs
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
BEGIN
    PERFORM pgtask.require_read_committed('changing a job');
    SELECT * INTO j FROM pgtask.jobs WHERE id = p_id;
    IF NOT FOUND OR NOT (j.status = ANY (p_statuses)) THEN
        RETURN NULL;
    END IF;
    IF j.group_key IS NOT NULL THEN
        PERFORM 1 FROM pgtask.queue_groups
          WHERE queue = j.queue AND group_key = j.group_key
            FOR UPDATE;
    END IF;
    SELECT * INTO j FROM pgtask.jobs WHERE id = p_id FOR UPDATE;
    IF NOT (j.status = ANY (p_statuses)) THEN
        RETURN NULL;
    END IF;
    RETURN j;
END;
$$;

-- Cancels a job that has not started: a scheduled or queued one, or a failed
-- one that blocks its group. Returns false for running or finished jobs.
CREATE OR REPLACE FUNCTION pgtask.cancel_job(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
BEGIN
    j := pgtask.lock_job_for_change(p_id, '{scheduled,queued,failed}');
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    IF j.status = 'failed'
       AND NOT (j.group_key IS NOT NULL AND pgtask.job_blocks_group(j.status, j.fail_blocks_group)) THEN
        -- Finished: it holds nothing up, and its failure stays on record.
        RETURN false;
    END IF;
    UPDATE pgtask.jobs
       SET status = 'cancelled', finished_at = clock_timestamp(),
           is_head = (is_head AND group_key IS NOT NULL)
     WHERE id = p_id;
    IF j.group_key IS NOT NULL AND j.is_head THEN
        PERFORM pgtask.advance_group(j.queue, j.group_key);
    END IF;
    RETURN true;
END;
$$;

-- Puts a failed or cancelled job back in line with a fresh set of attempts;
-- its error history stays. In a group it takes its place by id: a job that
-- blocked its group becomes runnable again, any other waits for the head.
CREATE OR REPLACE FUNCTION pgtask.retry_job(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
    head bigint;
    gid bigint;
BEGIN
    j := pgtask.lock_job_for_change(p_id, '{failed,cancelled}');
    IF j.id IS NULL THEN
        RETURN false;
    END IF;
    head := j.id;
    IF j.group_key IS NOT NULL THEN
        -- The group's row may be a newer one than the job's: the job joins it.
        INSERT INTO pgtask.queue_groups AS g (queue, group_key, head_id)
        VALUES (j.queue, j.group_key, j.id)
        ON CONFLICT (queue, group_key) DO UPDATE SET head_id = g.head_id
        RETURNING g.head_id, g.id INTO head, gid;
    END IF;
    UPDATE pgtask.jobs
       SET status = 'queued', is_head = (head = j.id), group_id = gid, attempts = 0,
           run_after = now(), started_at = NULL, finished_at = NULL, owner_pid = NULL
     WHERE id = p_id;
    IF head = j.id THEN
        PERFORM pg_notify('pgtask', j.queue);
    ELSE
        -- The group's head may be one that finished; let it move on.
        PERFORM pgtask.advance_group(j.queue, j.group_key);
    END IF;
    RETURN true;
END;
$$;

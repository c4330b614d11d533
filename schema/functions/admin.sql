-- revision: 22
-- An operator's changes to jobs: cancel, retry and delete, one or many.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change. A function whose
-- result changes is dropped first, by its argument list, since CREATE OR
-- REPLACE cannot change a result.

DROP FUNCTION IF EXISTS pgtask.cancel_requested(bigint[], integer[]);

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
-- one that blocks its group. For a running job it asks its worker to cancel
-- the attempt: a row in cancel_requests for the job, naming the attempt
-- seen running, and a notification on the channel "pgtask_cancel" whose
-- payload is "id:attempt". The attempt's handler gets its context
-- cancelled, and when the attempt fails, or its worker is lost, the job
-- ends cancelled (see fail_job); a handler that succeeds anyway succeeds.
-- The request holds for the job, not only the attempt it names: the
-- attempt seen running may be ending as it is filed, in a transaction
-- that cannot see it (a failure to retry, a snooze, a rescue, a lease's
-- expiry, a hand-back), and then the job's next claim finds it and cuts
-- that attempt short before its handler runs (cancel_claimed), and
-- apply_cancel_requests cancels the job if it waits unclaimed. Only the
-- job's end drops it: a success, a final failure, or an operator's retry
-- that commits after it (retry_job deletes it; a request that commits
-- after the retry cancels the retried job).
-- A running job is never waited for: in the held mode its worker holds its
-- row until the attempt ends, so a job claimed while this function locks
-- it is asked to stop instead. Returns false for finished jobs.
CREATE OR REPLACE FUNCTION pgtask.cancel_job(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
    locked boolean;
BEGIN
    PERFORM pgtask.require_read_committed('changing a job');
    LOOP
        SELECT * INTO j FROM pgtask.jobs WHERE id = p_id;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        IF j.status = 'started' THEN
            INSERT INTO pgtask.cancel_requests (job_id, attempt, cause) VALUES (p_id, j.attempts, 'operator')
                ON CONFLICT (job_id) DO UPDATE
                   SET attempt = excluded.attempt, requested_at = excluded.requested_at, cause = excluded.cause;
            PERFORM pg_notify('pgtask_cancel', p_id::text || ':' || j.attempts::text);
            RETURN true;
        END IF;
        IF NOT (j.status = ANY ('{scheduled,queued,failed}')) THEN
            RETURN false;
        END IF;
        -- Lock as lock_job_for_change does, the group's row first, but
        -- never wait for the job's row: whoever holds it claimed the job.
        IF j.group_key IS NOT NULL THEN
            PERFORM 1 FROM pgtask.queue_groups
              WHERE queue = j.queue AND group_key = j.group_key
                FOR UPDATE;
        END IF;
        BEGIN
            SELECT * INTO j FROM pgtask.jobs WHERE id = p_id FOR UPDATE NOWAIT;
            locked := true;
        EXCEPTION WHEN lock_not_available THEN
            locked := false;
        END;
        IF locked AND j.status = ANY ('{scheduled,queued,failed}') THEN
            EXIT;
        END IF;
        -- Claimed meanwhile (or briefly locked by another operator): look
        -- again.
        IF NOT locked THEN
            PERFORM pg_sleep(0.005);
        END IF;
    END LOOP;
    IF j.status = 'failed'
       AND NOT (j.group_key IS NOT NULL AND pgtask.job_blocks_group(j.status, j.fail_blocks_group)) THEN
        -- Finished: it holds nothing up, and its failure stays on record.
        RETURN false;
    END IF;
    DELETE FROM pgtask.cancel_requests WHERE job_id = p_id;
    UPDATE pgtask.jobs
       SET status = 'cancelled', finished_at = clock_timestamp(),
           is_head = (is_head AND group_key IS NOT NULL)
     WHERE id = p_id;
    -- Those waiting for its result (WaitJobs) learn it ended.
    PERFORM pg_notify('pgtask_finished', p_id::text);
    IF j.group_key IS NOT NULL AND j.is_head THEN
        PERFORM pgtask.advance_group(j.queue, j.group_key);
    END IF;
    RETURN true;
END;
$$;

-- Puts a failed or cancelled job back in line with a fresh set of attempts
-- and no progress; its error history stays, with the retry marked in it: an entry with
-- "operator_retry": true, the attempts made before it and when, since the
-- attempts after it count from 1 again. In a group it takes its place by id: a job that
-- blocked its group becomes runnable again, any other waits for the head.
-- retried says whether it did.
--
-- A unique job is held by its key again once it is queued. When another
-- job holds the key now (one enqueued after this one finished and freed
-- it), the job is left as it is, and held_by names that job. The key is
-- locked first as an enqueue locks it (advisory, until commit), so that an
-- enqueue of it meanwhile waits, then finds this job; it is locked before
-- the job's group and row, in the order an enqueue takes its locks.
CREATE OR REPLACE FUNCTION pgtask.retry_job(p_id bigint, OUT retried boolean, OUT held_by bigint)
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
    key text;
    head bigint;
    gid bigint;
    bound bigint;
BEGIN
    retried := false;
    -- A job's key never changes: read before anything is locked.
    SELECT unique_key INTO key FROM pgtask.jobs WHERE id = p_id;
    IF key IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(pgtask.unique_lock_class(), hashtext(key));
    END IF;
    j := pgtask.lock_job_for_change(p_id, '{failed,cancelled}');
    IF j.id IS NULL THEN
        RETURN;
    END IF;
    IF j.unique_key IS NOT NULL THEN
        SELECT h.id INTO held_by FROM pgtask.jobs h
         WHERE h.unique_key = j.unique_key AND h.status = ANY (h.unique_statuses) AND h.id <> j.id
         LIMIT 1;
        IF held_by IS NOT NULL THEN
            RETURN;
        END IF;
    END IF;
    -- A request left from before does not cancel the fresh attempts.
    DELETE FROM pgtask.cancel_requests WHERE job_id = p_id;
    -- Nor does progress left from before stay: the fresh attempts count
    -- from 1 again, and their reports would be refused as earlier than the
    -- attempt that made it (see ReportProgress in queries/work.sql).
    DELETE FROM pgtask.job_progress WHERE job_id = p_id;
    -- A job of an open batch is unfinished again: the batch's end is looked
    -- for from it on (see finish_batches). A batch that ended stays ended.
    IF j.batch_id IS NOT NULL THEN
        UPDATE pgtask.batches SET pending_from = least(pending_from, j.id)
         WHERE id = j.batch_id AND finished_at IS NULL;
    END IF;
    -- A limited job waits for a slot of its key (see functions/limits.sql).
    head := CASE WHEN j.limit_id IS NULL THEN j.id END;
    IF j.group_key IS NOT NULL THEN
        -- The group's row may be a newer one than the job's: the job joins
        -- it, and the group's next job is looked for from the job's id on
        -- (see pending_from). A row this inserts has the job as its head
        -- and no bound (an existing one comes back with its bound set).
        INSERT INTO pgtask.queue_groups AS g (queue, group_key)
        VALUES (j.queue, j.group_key)
        ON CONFLICT (queue, group_key) DO UPDATE
           SET pending_from = least(g.pending_from, j.id)
        RETURNING g.id, g.pending_from INTO gid, bound;
        IF bound IS NOT NULL THEN
            head := pgtask.group_head(j.queue, j.group_key, gid);
        END IF;
    END IF;
    -- A step's retry is told from its workflow's cancel by when each was
    -- made (see cancel_claimed): a cancel in flight, which holds the
    -- workflow's row updated until it commits, is waited for, so that the
    -- retry's time comes after that commit.
    IF j.workflow_id IS NOT NULL THEN
        PERFORM 1 FROM pgtask.workflows w WHERE w.id = j.workflow_id FOR SHARE;
    END IF;
    UPDATE pgtask.jobs
       SET status = 'queued', is_head = (head IS NOT DISTINCT FROM j.id), group_id = gid, attempts = 0, snoozes = 0,
           run_after = now(), started_at = NULL, finished_at = NULL, owner_pid = NULL,
           -- Its wait for a better priority starts again too.
           age_due = CASE WHEN j.aging_ms > 0 AND j.priority > 0 THEN now() + j.aging_ms * interval '1 millisecond' END,
           errors = pgtask.append_error(errors, jsonb_build_array(jsonb_build_object(
               'attempt', j.attempts,
               'error', format('retried by an operator after %s attempt(s); attempts count from 1 again', j.attempts),
               'at', clock_timestamp(), 'operator_retry', true)))
     WHERE id = p_id;
    IF j.limit_id IS NOT NULL THEN
        INSERT INTO pgtask.limit_checks (key_id) VALUES (j.limit_id);
    ELSIF head IS NOT DISTINCT FROM j.id THEN
        PERFORM pg_notify('pgtask_behind', j.id || ':' || j.queue);
    ELSE
        -- The group's head may be one that finished, or gone; let it move on.
        PERFORM pgtask.advance_group(j.queue, j.group_key);
    END IF;
    retried := true;
END;
$$;

-- Cancels (see cancel_job) each of p_ids, in id order, and returns how many
-- it changed. A job whose state does not allow it is left alone.
CREATE OR REPLACE FUNCTION pgtask.cancel_jobs(p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    i bigint;
    changed integer := 0;
BEGIN
    FOR i IN SELECT u FROM unnest(p_ids) u ORDER BY u LOOP
        IF pgtask.cancel_job(i) THEN
            changed := changed + 1;
        END IF;
    END LOOP;
    RETURN changed;
END;
$$;

-- Retries (see retry_job) each of p_ids, in id order: retried is how many
-- it retried; not_retried are those another job's hold on their unique key
-- kept from it, and held_by, index by index, the jobs holding the keys. A
-- job whose state does not allow it is left alone. The batch's keys are
-- locked first, in the order an enqueue locks its keys.
CREATE OR REPLACE FUNCTION pgtask.retry_jobs(p_ids bigint[], OUT retried integer, OUT not_retried bigint[], OUT held_by bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    i bigint;
    r record;
BEGIN
    retried := 0;
    not_retried := '{}';
    held_by := '{}';
    PERFORM pg_advisory_xact_lock(pgtask.unique_lock_class(), hashtext(d.k))
       FROM (SELECT DISTINCT j.unique_key::text COLLATE "default" AS k FROM pgtask.jobs j
              WHERE j.id = ANY (p_ids) AND j.unique_key IS NOT NULL AND j.status IN ('failed', 'cancelled')
              ORDER BY 1) d;
    FOR i IN SELECT u FROM unnest(p_ids) u ORDER BY u LOOP
        SELECT * INTO r FROM pgtask.retry_job(i);
        IF r.retried THEN
            retried := retried + 1;
        ELSIF r.held_by IS NOT NULL THEN
            not_retried := not_retried || i;
            held_by := held_by || r.held_by;
        END IF;
    END LOOP;
END;
$$;

-- Deletes those of p_ids that are finished and not their group's head (as
-- retention does), and returns how many.
CREATE OR REPLACE FUNCTION pgtask.delete_jobs(p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    deleted integer;
BEGIN
    DELETE FROM pgtask.jobs j
     WHERE j.id = ANY (p_ids) AND j.status IN ('succeeded', 'failed', 'cancelled')
       AND (j.group_key IS NULL OR NOT j.is_head);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;

-- Which of a worker's running attempts (p_ids with their p_attempts) a
-- cancel request asks to stop (an operator's, or its workflow's cancel),
-- with why (see cancel_requests.cause): the
-- worker's check of a notification, and for requests whose notification
-- it missed.
CREATE OR REPLACE FUNCTION pgtask.cancel_requested(p_ids bigint[], p_attempts integer[])
RETURNS TABLE (id bigint, cause text)
LANGUAGE sql STABLE AS $$
    SELECT r.job_id, r.cause FROM pgtask.cancel_requests r
      JOIN unnest(p_ids, p_attempts) AS a(id, attempt) ON r.job_id = a.id AND r.attempt = a.attempt;
$$;

-- Settles up to p_limit cancel requests whose attempt is no longer running.
-- One whose job now waits to run again (the attempt failed as the request
-- was made, and fail_job could not see it yet; or the job was handed back
-- unstarted) cancels the job; one whose job runs a later attempt (claimed
-- by a claim that could not see the request yet) is moved to that attempt,
-- whose worker is told (a notification, as cancel_job sends); one whose job
-- finished is dropped. Requests another session holds are skipped, and a
-- running job is never waited for (cancel_job).
-- A job whose row cannot be written, since it breaks a check the table was
-- given NOT VALID after the row was stored, is left as it is, its request
-- dropped. Returns how many jobs it cancelled.
CREATE OR REPLACE FUNCTION pgtask.apply_cancel_requests(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    cancelled integer := 0;
    bad text;
BEGIN
    FOR r IN
        SELECT c.job_id, c.attempt, j.status, j.attempts
          FROM pgtask.cancel_requests c
          LEFT JOIN pgtask.jobs j ON j.id = c.job_id
         WHERE j.id IS NULL OR NOT (j.status = 'started' AND j.attempts = c.attempt)
         ORDER BY c.job_id
         LIMIT p_limit
           FOR UPDATE OF c SKIP LOCKED
    LOOP
        IF r.status = 'started' THEN
            UPDATE pgtask.cancel_requests SET attempt = r.attempts WHERE job_id = r.job_id;
            PERFORM pg_notify('pgtask_cancel', r.job_id::text || ':' || r.attempts::text);
            CONTINUE;
        END IF;
        IF r.status IN ('scheduled', 'queued') THEN
            BEGIN
                IF pgtask.cancel_job(r.job_id) THEN
                    cancelled := cancelled + 1;
                END IF;
            EXCEPTION WHEN integrity_constraint_violation THEN
                -- Its row cannot be written (see unwritable_row); the
                -- request goes, and the others are carried out.
                GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
                PERFORM pgtask.unwritable_row(format('job %s not cancelled', r.job_id), bad);
            END;
        END IF;
        -- cancel_job filed a new request if the job was claimed meanwhile.
        DELETE FROM pgtask.cancel_requests
         WHERE job_id = r.job_id AND attempt = r.attempt
           AND NOT EXISTS (SELECT 1 FROM pgtask.jobs j
                            WHERE j.id = r.job_id AND j.status::text = 'started' AND j.attempts = r.attempt);
    END LOOP;
    RETURN cancelled;
END;
$$;

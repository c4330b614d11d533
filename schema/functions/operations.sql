-- revision: 3
-- Operations: the leader among workers, pausing queues, retention.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Elects p_worker to p_duty, or renews its term, and reports whether it
-- holds the duty for the next p_term_ms. A duty passes to another worker
-- when its holder's term ran out (it hung, or lost the database) or at once
-- when its holder's process is gone: every session of a worker holds its
-- worker lock shared (see LockWorker), so the lock is free only then.
CREATE OR REPLACE FUNCTION pgtask.elect(p_duty text, p_worker integer, p_term_ms integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    l pgtask.leaders;
    term_end timestamptz := clock_timestamp() + p_term_ms * interval '1 millisecond';
BEGIN
    INSERT INTO pgtask.leaders (duty, worker_id, until) VALUES (p_duty, p_worker, term_end)
    ON CONFLICT (duty) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT * INTO l FROM pgtask.leaders WHERE duty = p_duty FOR UPDATE;
    IF l.worker_id = p_worker THEN
        UPDATE pgtask.leaders SET until = term_end WHERE duty = p_duty;
        RETURN true;
    END IF;
    IF l.until < clock_timestamp() OR pg_try_advisory_xact_lock(pgtask.worker_lock_class(), l.worker_id) THEN
        UPDATE pgtask.leaders SET worker_id = p_worker, elected_at = clock_timestamp(), until = term_end
         WHERE duty = p_duty;
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

-- Gives up p_duty if p_worker holds it, so that another worker takes it at
-- its next election rather than at the end of the term.
CREATE OR REPLACE FUNCTION pgtask.resign(p_duty text, p_worker integer) RETURNS boolean
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM pgtask.leaders WHERE duty = p_duty AND worker_id = p_worker RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone);
$$;

-- Pauses a queue: claims take nothing from it until it is resumed, and
-- none that began before is still running when this returns (it waits for
-- them). Reports whether it was running.
CREATE OR REPLACE FUNCTION pgtask.pause_queue(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgtask.paused_queues (queue) VALUES (p_queue) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Wait for the claims that checked before this pause to commit: a claim
    -- holds the queue's pause lock shared until it does.
    PERFORM pg_advisory_xact_lock(pgtask.pause_lock_class(), hashtext(p_queue));
    RETURN true;
END;
$$;

-- Resumes a paused queue and wakes its workers. Reports whether it was
-- paused.
CREATE OR REPLACE FUNCTION pgtask.resume_queue(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgtask.paused_queues WHERE queue = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgtask_behind', p_queue);
    RETURN true;
END;
$$;

-- Deletes up to p_limit jobs of status p_status (a finished one) that
-- finished more than p_older_than_ms ago, oldest first, and returns how
-- many. A job that is still its group's head (a failure that blocks its
-- group, or a finished head whose group has yet to move on) is kept: its
-- group needs it; so is a job that holds its unique key (in a status its
-- key is held in, until its window ends). Rows locked by someone else are
-- left for the next round. The cutoff is computed first, so that the index
-- of finished jobs finds exactly those due.
CREATE OR REPLACE FUNCTION pgtask.delete_finished_jobs(p_status pgtask.job_status, p_older_than_ms bigint, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    deleted integer;
    cutoff timestamptz := clock_timestamp() - p_older_than_ms * interval '1 millisecond';
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'pgtask: retention deletes finished jobs only, not % ones', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH doomed AS (
        SELECT j.id FROM pgtask.jobs j
         WHERE j.status IN ('succeeded', 'failed', 'cancelled') AND j.status = p_status
           AND j.finished_at < cutoff
           AND (j.group_key IS NULL OR NOT j.is_head)
           AND NOT (j.unique_key IS NOT NULL AND j.status = ANY (j.unique_statuses)
                    AND (j.unique_until IS NULL OR j.unique_until > clock_timestamp()))
         ORDER BY j.finished_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM pgtask.jobs j USING doomed WHERE j.id = doomed.id;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;

-- Claims tick p_tick_at of periodic job p_name for the caller's transaction,
-- which then enqueues its job, and forgets that job's ticks older than
-- p_keep_after. Reports false when the tick is taken already, or is no
-- later than the latest tick taken (which may have forgotten it): another
-- worker enqueued it, or passed it by. Takes of one job's ticks wait for
-- each other.
CREATE OR REPLACE FUNCTION pgtask.take_periodic_tick(p_name text, p_tick_at timestamptz, p_keep_after timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(pgtask.unique_lock_class(), hashtext('periodic:' || p_name));
    IF EXISTS (SELECT 1 FROM pgtask.periodic_ticks WHERE name = p_name AND tick_at >= p_tick_at) THEN
        RETURN false;
    END IF;
    INSERT INTO pgtask.periodic_ticks (name, tick_at) VALUES (p_name, p_tick_at);
    DELETE FROM pgtask.periodic_ticks WHERE name = p_name AND tick_at < p_keep_after;
    RETURN true;
END;
$$;

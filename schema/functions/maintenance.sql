-- revision: 1
-- Maintenance that every worker runs: queueing due jobs and rescuing the
-- jobs of dead workers.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Moves due scheduled jobs to queued and wakes workers of the queues that got
-- runnable work. Returns how many jobs it moved.
CREATE OR REPLACE FUNCTION pgtask.promote_scheduled(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    moved integer;
    woken text[];
BEGIN
    WITH due AS (
        SELECT id FROM pgtask.jobs
         WHERE status = 'scheduled' AND run_after <= clock_timestamp()
         ORDER BY run_after
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgtask.jobs j SET status = 'queued'
          FROM due WHERE j.id = due.id
        RETURNING j.queue, j.is_head
    )
    SELECT count(*), array_agg(DISTINCT queue) FILTER (WHERE is_head)
      INTO moved, woken
      FROM promoted;
    PERFORM pg_notify('pgtask', q) FROM unnest(woken) q;
    RETURN moved;
END;
$$;

-- Requeues started jobs whose worker died. A job's session ending is not
-- enough: a worker process that lost a session (terminated, or a network
-- fault) still runs the handler and requeues the job itself when it returns.
-- So a job is an orphan when its session is gone (the row lock held by a live
-- job transaction makes SKIP LOCKED pass over running jobs; the backend check
-- covers the moment between a claim's commit and the job transaction taking
-- its lock; backend_start guards against a reused PID) and no session of its
-- worker process is left: every session of a worker holds its worker lock
-- shared (see LockWorker), so the lock is free only when all are gone. The
-- caller's own jobs (p_worker) are never its to rescue: it is alive, and its
-- session holds that lock too, which does not stop its own try below. After
-- the server restarts, every session ended at once, live workers' too: jobs
-- claimed before then wait 10 seconds for their workers to reconnect and take
-- their lock again. The attempt was counted at claim time, so a job that
-- kills its worker every time still runs out of attempts.
CREATE OR REPLACE FUNCTION pgtask.rescue_orphans(p_limit integer, p_worker integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    o record;
    queues text[] := '{}';
    keys text[] := '{}';
BEGIN
    FOR o IN
        SELECT j.id, j.attempts, j.owner_pid, j.queue, j.group_key, j.worker_id, j.started_at
          FROM pgtask.jobs j
         WHERE j.status = 'started' AND j.worker_id IS DISTINCT FROM p_worker
           AND NOT EXISTS (
               SELECT 1 FROM pg_stat_activity a
                WHERE a.pid = j.owner_pid
                  AND (a.backend_start IS NULL OR a.backend_start <= j.started_at))
         ORDER BY j.id
         LIMIT p_limit
           FOR UPDATE OF j SKIP LOCKED
    LOOP
        CONTINUE WHEN o.worker_id IS NOT NULL
                 AND NOT pg_try_advisory_xact_lock(pgtask.worker_lock_class(), o.worker_id);
        CONTINUE WHEN o.started_at < pg_postmaster_start_time()
                 AND clock_timestamp() < pg_postmaster_start_time() + interval '10 seconds';
        PERFORM pgtask.fail_job(o.id, o.attempts, jsonb_build_object(
            'attempt', o.attempts,
            'error', format('worker lost: its database session (pid %s) ended during the attempt', o.owner_pid)),
            0);
        queues := queues || o.queue;
        keys := keys || o.group_key;
        RETURN NEXT o.id;
    END LOOP;
    -- A job that ran out of attempts just now finished its group's head.
    PERFORM pgtask.advance_group(t.q, t.k)
       FROM (SELECT DISTINCT q, k FROM unnest(queues, keys) AS u(q, k) WHERE k IS NOT NULL ORDER BY 1, 2) t;
END;
$$;

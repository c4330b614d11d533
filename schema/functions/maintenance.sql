-- revision: 17
-- Maintenance that every worker runs: queueing due jobs and rescuing the
-- jobs of dead workers.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Says, as a warning in the server's log, what maintenance left as it was
-- (p_left: "job 7 not rescued", say) because a row it had to change breaks
-- the check p_constraint, which the table was given NOT VALID after the row
-- was stored: no change to such a row can be written. The row has to be
-- deleted by hand; the rest goes on.
CREATE OR REPLACE FUNCTION pgtask.unwritable_row(p_left text, p_constraint text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE WARNING 'pgtask: % : a row breaks check constraint %, added NOT VALID after the row was stored, so no change to it can be written; delete the row',
        p_left, coalesce(nullif(p_constraint, ''), '(unknown)');
END;
$$;

-- Moves due scheduled jobs to queued and wakes workers of the queues that got
-- runnable work, on "pgtask_behind" with the queue's first such job
-- ("id:queue"; the queue alone when it moved jobs one at a time): moved is
-- how many it moved. A row that breaks a check the
-- table was given NOT VALID after the row was stored (by a migration after
-- the baseline) cannot be written at all, so no update can
-- move or fail it; it is left as it is, in skipped, for an operator to
-- delete, and the jobs due with it move on. The batch is moved in one
-- statement; only when that fails on such a row, one job at a time.
CREATE OR REPLACE FUNCTION pgtask.promote_scheduled(p_limit integer, OUT moved integer, OUT skipped bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    due bigint[];
    woken text[];
    i bigint;
    q text;
    head boolean;
    lim bigint;
    -- A value, not clock_timestamp() in the condition: a volatile call
    -- cannot bound the index scan, which would then read every scheduled
    -- job, due or not, every round.
    now_ts timestamptz := clock_timestamp();
BEGIN
    skipped := '{}';
    SELECT coalesce(array_agg(d.id ORDER BY d.run_after), '{}') INTO due
      FROM (SELECT id, run_after FROM pgtask.jobs
             WHERE status = 'scheduled' AND run_after <= now_ts
             ORDER BY run_after
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    BEGIN
        WITH promoted AS (
            UPDATE pgtask.jobs j SET status = 'queued'
             WHERE j.id = ANY (due)
            RETURNING j.queue, j.is_head, j.id, j.limit_id
        ), checks AS (
            -- A limited job due now waits for a slot of its key (see
            -- functions/limits.sql): check_limits admits it.
            INSERT INTO pgtask.limit_checks (key_id)
            SELECT DISTINCT limit_id FROM promoted WHERE limit_id IS NOT NULL
        )
        SELECT (SELECT count(*) FROM promoted),
               coalesce((SELECT array_agg(h.first_id || ':' || h.queue)
                           FROM (SELECT queue, min(id) AS first_id FROM promoted WHERE is_head GROUP BY queue) h), '{}')
          INTO moved, woken;
    EXCEPTION WHEN integrity_constraint_violation THEN
        moved := 0;
        woken := '{}';
        FOREACH i IN ARRAY due LOOP
            BEGIN
                UPDATE pgtask.jobs SET status = 'queued' WHERE id = i RETURNING queue, is_head, limit_id INTO q, head, lim;
                moved := moved + 1;
                IF lim IS NOT NULL THEN
                    INSERT INTO pgtask.limit_checks (key_id) VALUES (lim);
                END IF;
                IF head AND q <> ALL (woken) THEN
                    woken := woken || q;
                END IF;
            EXCEPTION WHEN integrity_constraint_violation THEN
                skipped := skipped || i;
            END;
        END LOOP;
    END;
    PERFORM pg_notify('pgtask_behind', w) FROM unnest(woken) w;
END;
$$;

-- Priority aging: each queued head that waited aging_ms for its next level
-- (age_due has passed) gets one level better for every aging_ms waited,
-- never past 0, up to p_limit jobs, the longest due first. A job's wait
-- counts from when it was first due to run, so a job that waited behind its
-- group's earlier jobs, or out a retry's backoff, catches up all at once
-- when it becomes a queued head. Jobs at priority 0 or better never age:
-- negative priorities stay ahead of every aged job. Workers of each queue
-- with a job that got better are woken on "pgtask_behind", with the
-- queue's first such job ("id:queue"): the job may now sort before their
-- claims' cursors, and they look behind them from there. A limited job
-- waiting for a slot ages too: its key admits waiting jobs by priority, so
-- a steady supply of better ones would otherwise keep it waiting for good.
-- It wakes no worker (it is not runnable yet), but leaves a check of its
-- key (see functions/limits.sql): a slot freed while this held the job's
-- row went past it, and check_limits admits it into that slot. A job
-- waiting for a token of its rate key ages for the same reason, and leaves
-- a check of its key (see functions/rates.sql): the key's claims look for
-- its jobs from the last one they took, which it may now sort before, and
-- check_rates has the next claim look from the key's start. A job whose row cannot be written (it
-- breaks a check the table was given NOT VALID after it was stored) is left
-- as it is, in skipped, and the others age; the batch is changed in one
-- statement, and only when that fails on such a row, one job at a time.
CREATE OR REPLACE FUNCTION pgtask.age_priorities(p_limit integer, OUT aged integer, OUT skipped bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    due bigint[];
    woken text[];
    i bigint;
    q text;
    head boolean;
    lim bigint;
    rid bigint;
    aged_ids bigint[] := '{}';
    aged_queues text[] := '{}';
    -- A value, not clock_timestamp() in the condition: a volatile call
    -- cannot bound the index scan, which would then read every job that may
    -- age, due or not, every round.
    now_ts timestamptz := clock_timestamp();
BEGIN
    skipped := '{}';
    SELECT coalesce(array_agg(d.id ORDER BY d.age_due), '{}') INTO due
      FROM (SELECT id, age_due FROM pgtask.jobs
             WHERE status = 'queued' AND (is_head OR limit_id IS NOT NULL OR rate_id IS NOT NULL) AND age_due <= now_ts
             ORDER BY age_due
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) d;
    IF cardinality(due) = 0 THEN
        aged := 0;
        RETURN;
    END IF;
    BEGIN
        WITH stepped AS (
            UPDATE pgtask.jobs j
               SET priority = n.priority,
                   age_due = CASE WHEN n.priority > 0 THEN j.age_due + n.steps::float8 * j.aging_ms * interval '1 millisecond' END
              FROM (SELECT x.id, greatest(0, x.priority - x.steps)::smallint AS priority, x.steps
                      FROM (SELECT id, priority,
                                   least(32767, 1 + floor(extract(epoch FROM now_ts - age_due) * 1000 / aging_ms))::integer AS steps
                              FROM pgtask.jobs WHERE id = ANY (due) AND aging_ms > 0) x) n
             WHERE j.id = n.id
            RETURNING j.queue, j.id, j.is_head, j.limit_id, j.rate_id
        ), checks AS (
            INSERT INTO pgtask.limit_checks (key_id)
            SELECT DISTINCT s.limit_id FROM stepped s WHERE NOT s.is_head AND s.limit_id IS NOT NULL
        ), rate_checks AS (
            INSERT INTO pgtask.rate_checks (key_id)
            SELECT DISTINCT s.rate_id FROM stepped s WHERE s.rate_id IS NOT NULL
        )
        SELECT (SELECT count(*) FROM stepped),
               coalesce((SELECT array_agg(w.first_id || ':' || w.queue)
                           FROM (SELECT queue, min(id) AS first_id FROM stepped WHERE is_head GROUP BY queue) w), '{}')
          INTO aged, woken;
    EXCEPTION WHEN integrity_constraint_violation THEN
        aged := 0;
        woken := '{}';
        FOREACH i IN ARRAY due LOOP
            BEGIN
                UPDATE pgtask.jobs j
                   SET priority = greatest(0, j.priority - s.steps),
                       age_due = CASE WHEN j.priority - s.steps > 0
                                      THEN j.age_due + s.steps::float8 * j.aging_ms * interval '1 millisecond' END
                  FROM (SELECT least(32767, 1 + floor(extract(epoch FROM now_ts - age_due) * 1000 / aging_ms))::integer AS steps
                          FROM pgtask.jobs WHERE id = i AND aging_ms > 0) s
                 WHERE j.id = i
                RETURNING j.queue, j.is_head, j.limit_id, j.rate_id INTO q, head, lim, rid;
                IF FOUND THEN
                    aged := aged + 1;
                    IF head THEN
                        aged_ids := aged_ids || i;
                        aged_queues := aged_queues || q;
                    ELSIF lim IS NOT NULL THEN
                        INSERT INTO pgtask.limit_checks (key_id) VALUES (lim);
                    ELSIF rid IS NOT NULL THEN
                        INSERT INTO pgtask.rate_checks (key_id) VALUES (rid);
                    END IF;
                END IF;
            EXCEPTION WHEN integrity_constraint_violation THEN
                skipped := skipped || i;
            END;
        END LOOP;
    END;
    IF cardinality(aged_ids) > 0 THEN
        SELECT array_agg(w.first_id || ':' || w.q) INTO woken
          FROM (SELECT u.q, min(u.id) AS first_id FROM unnest(aged_queues, aged_ids) AS u(q, id) GROUP BY u.q) w;
    END IF;
    PERFORM pg_notify('pgtask_behind', w) FROM unnest(woken) w;
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
-- caller's own jobs (p_worker) are never its to rescue here: it is alive, and
-- its session holds that lock too, which does not stop its own try below; it
-- finds those with own_orphans. After the server restarts, every session
-- ended at once, live workers' too: jobs claimed before then wait 10 seconds
-- for their workers to reconnect and take their lock again. The attempt was
-- counted at claim time, so a job that kills its worker every time still
-- runs out of attempts.
CREATE OR REPLACE FUNCTION pgtask.rescue_orphans(p_limit integer, p_worker integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    o record;
    ids bigint[] := '{}';
BEGIN
    FOR o IN
        SELECT j.id, j.worker_id, j.started_at
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
        ids := ids || o.id;
    END LOOP;
    RETURN QUERY SELECT r.id FROM pgtask.rescue_jobs(ids) AS r(id);
END;
$$;

-- The caller's own held-mode jobs whose job session is gone, locked for the
-- rest of the caller's transaction: a claim that committed after the worker
-- gave up waiting for its reply, or the batch of a lost session the worker
-- could not record. The worker is alive, so only it can tell whether a
-- handler of its still runs such a job: the claim's token says which of its
-- claims took the job, and the worker passes to rescue_jobs only those of
-- claims it no longer holds. (Locked first, checked after: a claim the
-- worker still works on was marked as held before it was sent.)
CREATE OR REPLACE FUNCTION pgtask.own_orphans(p_worker integer, p_limit integer)
RETURNS TABLE (id bigint, claim_token bigint)
LANGUAGE sql AS $$
    SELECT j.id, j.claim_token
      FROM pgtask.jobs j
     WHERE j.status = 'started' AND j.worker_id = p_worker
       AND j.owner_pid IS NOT NULL AND j.lease_until IS NULL
       AND NOT EXISTS (
           SELECT 1 FROM pg_stat_activity a
            WHERE a.pid = j.owner_pid
              AND (a.backend_start IS NULL OR a.backend_start <= j.started_at))
     ORDER BY j.id
     LIMIT p_limit
       FOR UPDATE OF j SKIP LOCKED
$$;

-- Records the attempt of each of the started jobs p_ids as lost with its
-- worker, then moves on the groups whose head ran out of attempts. Returns
-- the jobs it rescued. A job whose row cannot be written, since it breaks a
-- check the table was given NOT VALID after the row was stored, is left as
-- it is (see unwritable_row), and the others are rescued: the jobs are
-- rescued all at once, and only when that fails on such a row, each in a
-- subtransaction of its own (many subtransactions in one transaction slow
-- every session's snapshots down).
CREATE OR REPLACE FUNCTION pgtask.rescue_jobs(p_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    o record;
    entry jsonb;
    careful boolean := false;
    done bigint[];
    queues text[];
    keys text[];
    bad text;
BEGIN
    LOOP
        done := '{}';
        queues := '{}';
        keys := '{}';
        BEGIN
            FOR o IN
                SELECT j.id, j.attempts, j.owner_pid, j.queue, j.group_key
                  FROM pgtask.jobs j
                 WHERE j.id = ANY (p_ids) AND j.status::text = 'started'
                 ORDER BY j.id
                   FOR UPDATE OF j
            LOOP
                entry := jsonb_build_object(
                    'attempt', o.attempts,
                    'error', CASE WHEN o.owner_pid IS NULL
                                  THEN 'worker lost: its process ended during the attempt'
                                  ELSE format('worker lost: its database session (pid %s) ended during the attempt', o.owner_pid) END);
                IF careful THEN
                    BEGIN
                        PERFORM pgtask.fail_job(o.id, o.attempts, entry, 0, NULL, NULL);
                    EXCEPTION WHEN integrity_constraint_violation THEN
                        GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
                        PERFORM pgtask.unwritable_row(format('job %s not rescued', o.id), bad);
                        CONTINUE;
                    END;
                ELSE
                    PERFORM pgtask.fail_job(o.id, o.attempts, entry, 0, NULL, NULL);
                END IF;
                done := done || o.id;
                queues := queues || o.queue;
                keys := keys || o.group_key;
            END LOOP;
            EXIT;
        EXCEPTION WHEN integrity_constraint_violation THEN
            IF careful THEN
                RAISE;
            END IF;
            careful := true;
        END;
    END LOOP;
    -- A job that ran out of attempts just now finished its group's head.
    PERFORM pgtask.advance_each_group(
        ARRAY(SELECT t.q FROM (SELECT DISTINCT q, k FROM unnest(queues, keys) AS u(q, k) WHERE k IS NOT NULL ORDER BY 1, 2) t),
        ARRAY(SELECT t.k FROM (SELECT DISTINCT q, k FROM unnest(queues, keys) AS u(q, k) WHERE k IS NOT NULL ORDER BY 1, 2) t));
    RETURN QUERY SELECT unnest(done);
END;
$$;

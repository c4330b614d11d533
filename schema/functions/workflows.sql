-- revision: 19
-- Workflows (runtime.Workflow): jobs enqueued together, each step starting
-- only when its parents allow it. See the tables in 0001_baseline.sql.
--
-- A step with parents is enqueued parked (see parked_at), so it is in no
-- claim index while it waits. Its waits row counts the parents it still
-- waits for. The transaction that finishes a parent (the triggers of
-- 0001_baseline.sql, whatever finishes it: a success, a final failure, a
-- cancel, a delete) tells each of its children: with the child's waits row
-- taken with SKIP LOCKED, it applies the outcome at once (a success counts
-- down, and the last one releases the child in that same transaction); with
-- the row locked by another finisher of the same child (a fan-in, whose
-- finishers in held batches keep their transaction open up to the commit
-- budget), it leaves a note and notifies "pgtask_workflow" with the child's
-- id. Notes are applied under the child's row lock, each deleted as it is
-- applied, by whoever gets that lock next: the notified workers right after
-- the commit, the next finisher of a parent of the child, or maintenance.
-- An edge's outcome is written once (only while it is NULL), so a note met
-- twice changes nothing the second time. Nobody waits for a waits row but
-- an operator's retry, which no finisher waits for.
--
-- Outcomes are told a set of parents at a time, never a step at a time: a
-- few statements take every child's waits row of the set (SKIP LOCKED),
-- leave the notes of the children taken elsewhere (one notification per
-- 300 of them, the most a payload holds), write the edges' outcomes,
-- count the children down, cancel the children a failure cancels under
-- 'c', cancel the workflows of failures under 'w', and release the
-- children whose count reached 0. A failure cancels the children whose
-- edge says so, and their cancel tells their children in turn: the next
-- level of the cascade, told as a set the same way. The steps a cascade
-- (or a workflow's cancel, or the restore after a retry) changes itself
-- are told by it, not by the triggers: it sets pgtask.wf_quiet around its
-- own updates of jobs, which the triggers' WHEN clauses skip. So a
-- cascade costs a few statements per level, whatever the number of steps
-- in it, and a notification per level (per 300 steps) for those waiting
-- for the steps' results, per queue for the steps released. The restore
-- after a retry puts the steps it frees back in line together too, the
-- grouped ones in their groups, and parks them itself (the trigger that
-- parks a retried step is quiet for it as well). One thing stays one per
-- step: each running step a workflow's cancel asks to stop gets a
-- "pgtask_cancel" notification of its own for its worker, so as many as
-- the workflow runs at once, not as it has steps. While outcomes
-- are being told (pgtask.wf_busy), or while a batch of outcomes is
-- recorded (pgtask.wf_defer), the steps that change are queued (see
-- workflow_queue_add), and the outermost caller works the queue off, one
-- level at a time, so a chain of any length costs no stack.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change. A function whose
-- arguments change is dropped first, by its former argument list, so that
-- no other signature of it survives a re-apply.

DROP FUNCTION IF EXISTS pgtask.workflow_cancel(bigint);

-- Enqueues a workflow named p_name: its steps are the jobs the other
-- arguments, those of pgtask.enqueue_jobs, describe, inserted into it at
-- once (see InsertWorkflow in queries/enqueue.sql), and edge i makes step
-- p_children[i] (1-based) wait for step p_parents[i], with the policy
-- p_policies[i] ('c', 'a' or 'w'). Every parent comes before its child,
-- which rules out cycles, and a step has parents if and only if it is
-- enqueued parked. Returns the steps' ids in order and the workflow's id.
--
-- The steps are inserted with their workflow_id, so that making the
-- workflow writes no job twice: a write per step for the job (as for
-- EnqueueMany), one per edge and one per step with parents, and the
-- steps' parking is checked by reading them.
--
-- It runs as its owner, like enqueue_jobs, so that a producer role makes
-- workflows without any privilege on the tables.
DROP FUNCTION IF EXISTS pgtask.create_workflow(bigint[], boolean[], text, integer[], integer[], text[]);
CREATE OR REPLACE FUNCTION pgtask.create_workflow(
    p_name text, p_parents integer[], p_children integer[], p_policies text[],
    p_payloads jsonb[], p_settings integer[], p_groups integer[],
    p_kinds text[], p_queues text[], p_priorities smallint[], p_aging_ms integer[], p_max_attempts integer[],
    p_fail_blocks_group boolean[], p_run_at text[], p_delay_us bigint[],
    p_group_queues text[], p_group_keys text[],
    p_unique_keys text[], p_unique_windows_us bigint[], p_unique_statuses text[],
    p_metadata jsonb[],
    p_limits integer[], p_limit_queues text[], p_limit_keys text[], p_limit_max integer[],
    p_limit_strategies text[],
    p_rates integer[], p_rate_queues text[], p_rate_keys text[], p_rate_n integer[], p_rate_period_us bigint[],
    p_rate_burst integer[],
    p_fair integer[], p_fair_queues text[], p_fair_tenants text[],
    OUT step_ids bigint[], OUT new_workflow_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgtask, pg_temp
AS $$
DECLARE
    n integer := coalesce(cardinality(p_payloads), 0);
    ne integer := coalesce(cardinality(p_parents), 0);
    wid bigint;
    existed boolean[];
    wrong integer;
BEGIN
    IF n = 0 THEN
        RAISE EXCEPTION 'pgtask.create_workflow: a workflow needs at least one step' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(cardinality(p_children), 0) <> ne OR coalesce(cardinality(p_policies), 0) <> ne THEN
        RAISE EXCEPTION 'pgtask.create_workflow: the edges'' lists differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_parents, p_children, p_policies) AS e(p, c, pol)
                WHERE e.p IS NULL OR e.c IS NULL OR e.p < 1 OR e.c > n OR e.p >= e.c OR e.pol IS NULL OR e.pol NOT IN ('c', 'a', 'w')) THEN
        RAISE EXCEPTION 'pgtask.create_workflow: an edge names no step, or a step after its child, or no policy' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_unique_keys IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_unique_keys) k WHERE k <> '') THEN
        RAISE EXCEPTION 'pgtask.create_workflow: every step of a workflow must be new (no unique keys)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgtask.workflows (name, steps, edges) VALUES (p_name, n, ne) RETURNING id INTO wid;
    SELECT e.job_ids, e.job_existed INTO step_ids, existed
      FROM pgtask.enqueue_jobs(
          p_payloads, p_settings, p_groups, p_kinds, p_queues, p_priorities, p_aging_ms, p_max_attempts,
          p_fail_blocks_group, p_run_at, p_delay_us, p_group_queues, p_group_keys,
          p_unique_keys, p_unique_windows_us, p_unique_statuses, p_metadata,
          p_limits, p_limit_queues, p_limit_keys, p_limit_max, p_limit_strategies,
          p_rates, p_rate_queues, p_rate_keys, p_rate_n, p_rate_period_us, p_rate_burst,
          p_fair, p_fair_queues, p_fair_tenants, wid) e;
    IF coalesce(cardinality(step_ids), 0) <> n OR true = ANY (existed) THEN
        RAISE EXCEPTION 'pgtask.create_workflow: every step of a workflow must be new (no unique keys)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Which steps have parents, by one hash join of the steps with the
    -- children (not a look through the edges for each step); the steps
    -- are read as the workflow's jobs, in its index.
    SELECT count(*) INTO wrong
      FROM pgtask.jobs j
      JOIN unnest(step_ids) WITH ORDINALITY AS i(id, n) ON i.id = j.id
      LEFT JOIN (SELECT DISTINCT c FROM unnest(p_children) AS c) k ON k.c = i.n
     WHERE j.workflow_id = wid
       AND (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) <> (k.c IS NOT NULL);
    IF wrong > 0 THEN
        RAISE EXCEPTION 'pgtask.create_workflow: % step(s) are parked without parents, or have parents and are not parked', wrong
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- An edge listed twice breaks the edges' primary key.
    INSERT INTO pgtask.workflow_edges (workflow_id, parent, child, step, policy)
    SELECT wid, step_ids[e.p], step_ids[e.c], e.p - 1, e.pol::"char"
      FROM unnest(p_parents, p_children, p_policies) AS e(p, c, pol);
    INSERT INTO pgtask.workflow_waits (job_id, workflow_id, remaining)
    SELECT step_ids[e.c], wid, count(*)
      FROM unnest(p_children) AS e(c)
     GROUP BY e.c;
    new_workflow_id := wid;
END;
$$;

-- Makes parked steps p_ids runnable: due now, their wait for a better
-- priority counted from now, and announced: left for the claim that
-- follows in this transaction when of the queue that claim is for (see
-- settle_jobs), else on pgtask_behind, once per queue with the first
-- one's id. A limited step waits for a slot of its key (a check of it,
-- which maintenance applies). The steps of a cancelled workflow are
-- cancelled instead.
--
-- The workflows' rows are read FOR SHARE and stay so until this
-- transaction ends: a cancel in flight (which holds the row updated until
-- its commit) is waited for and seen, and a cancel that comes after waits
-- for this release to commit, then finds the steps released (see
-- workflow_cancel_steps). So no step is released after its workflow's
-- cancel committed.
CREATE OR REPLACE FUNCTION pgtask.workflow_release(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    stopped bigint[];
    doomed bigint[];
    queues text[];
    heads text[];
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(w.id) FILTER (WHERE w.cancelled_at IS NOT NULL), '{}') INTO stopped
      FROM (SELECT w.id, w.cancelled_at FROM pgtask.workflows w
             WHERE w.id IN (SELECT DISTINCT j.workflow_id FROM pgtask.jobs j WHERE j.id = ANY (p_ids))
             ORDER BY w.id
               FOR SHARE) w;
    IF cardinality(stopped) > 0 THEN
        SELECT coalesce(array_agg(j.id), '{}') INTO doomed
          FROM pgtask.jobs j WHERE j.id = ANY (p_ids) AND j.workflow_id = ANY (stopped);
        PERFORM pgtask.workflow_cancel_unstarted(doomed, true);
    END IF;
    -- The steps are found by id: "parked" is tested so (IS TRUE) that the
    -- index of scheduled jobs cannot serve it, which would read every
    -- parked step of every workflow, for each set of steps.
    WITH released AS (
        UPDATE pgtask.jobs j
           SET status = 'queued', run_after = clock_timestamp(),
               age_due = CASE WHEN j.aging_ms > 0 AND j.priority > 0
                              THEN clock_timestamp() + j.aging_ms * interval '1 millisecond' END
         WHERE j.id = ANY (p_ids) AND (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) IS TRUE
           AND j.workflow_id <> ALL (stopped)
        RETURNING j.id, j.queue, j.is_head, j.limit_id
    ), checks AS (
        INSERT INTO pgtask.limit_checks (key_id)
        SELECT DISTINCT r.limit_id FROM released r WHERE r.limit_id IS NOT NULL
    )
    SELECT coalesce(array_agg(x.queue ORDER BY x.queue), '{}'), coalesce(array_agg(x.ids ORDER BY x.queue), '{}')
      INTO queues, heads
      FROM (SELECT r.queue, array_to_string(array_agg(r.id ORDER BY r.id), ',') AS ids
              FROM released r
             WHERE r.limit_id IS NULL AND r.is_head
             GROUP BY r.queue) x;
    FOR i IN 1 .. cardinality(queues) LOOP
        IF current_setting('pgtask.claiming', true) = 'on' AND current_setting('pgtask.settling', true) = queues[i] THEN
            PERFORM set_config('pgtask.promoted',
                               concat_ws(',', nullif(current_setting('pgtask.promoted', true), ''), heads[i]), true);
        ELSE
            PERFORM pg_notify('pgtask_behind', split_part(heads[i], ',', 1) || ':' || queues[i]);
        END IF;
    END LOOP;
END;
$$;

-- Cancels steps p_ids that have not started (only the parked ones with
-- p_parked_only), as an operator's cancel would: the caller holds their
-- rows, and a queued grouped step's group row, or may wait for them. A
-- grouped head lets its group move on; a limited one gives its slot back
-- (the triggers of limits). Those waiting for their results are told on
-- pgtask_finished, and their children through workflow_steps_changed, all
-- together. Returns how many it cancelled.
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel_unstarted(p_ids bigint[], p_parked_only boolean) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ids bigint[];
    hq text[];
    hk text[];
    g record;
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN 0;
    END IF;
    -- Their children are told below, together: the triggers skip them.
    -- (Found by id, as in workflow_release.)
    PERFORM set_config('pgtask.wf_quiet', 'on', true);
    WITH gone AS (
        UPDATE pgtask.jobs j
           SET status = 'cancelled', finished_at = clock_timestamp(),
               is_head = (j.is_head AND j.group_key IS NOT NULL)
         WHERE j.id = ANY (p_ids) AND j.status IN ('scheduled', 'queued')
           AND (NOT p_parked_only OR (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) IS TRUE)
        RETURNING j.id, j.queue, j.group_key, j.is_head
    ), requests AS (
        DELETE FROM pgtask.cancel_requests c WHERE c.job_id IN (SELECT id FROM gone)
    )
    SELECT coalesce(array_agg(id ORDER BY id), '{}'),
           coalesce(array_agg(queue) FILTER (WHERE group_key IS NOT NULL AND is_head), '{}'),
           coalesce(array_agg(group_key) FILTER (WHERE group_key IS NOT NULL AND is_head), '{}')
      INTO ids, hq, hk
      FROM gone;
    PERFORM set_config('pgtask.wf_quiet', 'off', true);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    -- A payload holds at most 8000 bytes: 300 ids of up to 19 digits.
    FOR i IN 0 .. (cardinality(ids) - 1) / 300 LOOP
        PERFORM pg_notify('pgtask_finished', array_to_string(ids[i * 300 + 1 : (i + 1) * 300], ','));
    END LOOP;
    FOR g IN
        SELECT u.q, array_agg(DISTINCT u.k) AS keys FROM unnest(hq, hk) AS u(q, k) GROUP BY u.q ORDER BY u.q
    LOOP
        -- An enqueue in flight into a group leaves it to maintenance
        -- (advance_finished_groups), as for a worker.
        PERFORM pgtask.advance_group_set(g.q, g.keys, NULL);
    END LOOP;
    PERFORM pgtask.workflow_steps_changed(ids, 'f');
    RETURN cardinality(ids);
END;
$$;

-- What workflow_apply_locked applies, in one statement: the notes left
-- for children p_children (deleted), the outcomes written on the edges
-- (each once), the children's counts taken down; returns how many notes it
-- applied, the children a failure cancels, those released, and the
-- workflows a failure cancels with the step (by place) that does.
--
-- Each edge and waits row by its key, whatever the tables' statistics:
-- with none yet (a workflow just enqueued), the planner takes the edges
-- not told for a handful and reads all of them, of every workflow, to
-- tell a few, in a scan or a hash join. Such plans do for any arrays, so
-- they are made once per session, not for each call's arrays. (These
-- settings hold for this function only: what the caller does with the
-- result plans as any statement does.)
CREATE OR REPLACE FUNCTION pgtask.workflow_tell_locked(p_children bigint[], p_told bigint[], p_parents bigint[],
                                                       p_outcomes "char"[], OUT noted integer, OUT cancelled bigint[],
                                                       OUT released bigint[], OUT stopping bigint[],
                                                       OUT stopping_steps integer[])
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    WITH notes AS (
        DELETE FROM pgtask.workflow_notes n WHERE n.child = ANY (p_children)
        RETURNING n.child, n.parent, n.outcome
    ), outcomes AS (
        SELECT DISTINCT ON (x.child, x.parent) x.child, x.parent, x.outcome
          FROM (SELECT u.c AS child, u.p AS parent, u.o AS outcome FROM unnest(p_told, p_parents, p_outcomes) AS u(c, p, o)
                UNION ALL
                SELECT n.child, n.parent, n.outcome FROM notes n) x
         ORDER BY x.child, x.parent
    ), told AS (
        UPDATE pgtask.workflow_edges e SET outcome = o.outcome
          FROM outcomes o
         WHERE e.parent = o.parent AND e.child = o.child AND e.outcome IS NULL
        RETURNING e.child, e.parent, e.step, e.policy, o.outcome
    ), per_child AS (
        SELECT t.child,
               count(*) FILTER (WHERE t.outcome = 's' OR t.policy = 'a') AS down,
               min(t.parent) FILTER (WHERE t.outcome = 'f' AND t.policy = 'c') AS cancelled_by,
               min(t.step) FILTER (WHERE t.outcome = 'f' AND t.policy = 'w') AS stopped_by
          FROM told t
         GROUP BY t.child
    ), counted AS (
        UPDATE pgtask.workflow_waits w
           SET remaining = w.remaining - c.down, cancelled_by = coalesce(w.cancelled_by, c.cancelled_by)
          FROM per_child c
         WHERE w.job_id = c.child
        RETURNING w.job_id, w.workflow_id, w.remaining, w.cancelled_by, c.down,
                  c.cancelled_by IS NOT NULL AS cancels, c.stopped_by
    )
    SELECT (SELECT count(*) FROM notes),
           coalesce(array_agg(c.job_id ORDER BY c.job_id) FILTER (WHERE c.cancels), '{}'),
           coalesce(array_agg(c.job_id ORDER BY c.job_id) FILTER (WHERE c.down > 0 AND c.remaining = 0 AND c.cancelled_by IS NULL), '{}'),
           (SELECT coalesce(array_agg(x.workflow_id ORDER BY x.workflow_id), '{}')
              FROM (SELECT DISTINCT k.workflow_id FROM counted k WHERE k.stopped_by IS NOT NULL) x),
           (SELECT coalesce(array_agg(x.step ORDER BY x.workflow_id), '{}')
              FROM (SELECT k.workflow_id, min(k.stopped_by) AS step FROM counted k
                     WHERE k.stopped_by IS NOT NULL GROUP BY k.workflow_id) x)
      INTO noted, cancelled, released, stopping, stopping_steps
      FROM counted c;
END;
$$;

-- Applies to children p_children, whose waits rows the caller holds
-- locked, the notes left for them (deleting them) and the outcomes
-- p_outcomes of parents p_parents (of children p_told, index by index),
-- all in one statement: each edge's outcome written once (an edge told
-- already is left alone), each child's count taken down by its parents'
-- successes and failures under policy 'a'. Then, for all of them
-- together: a failure under 'w' cancels the whole workflow, one under 'c'
-- cancels the child (a cancel wins over a release), and a child whose
-- count reached 0 is released. Returns how many notes it applied.
CREATE OR REPLACE FUNCTION pgtask.workflow_apply_locked(p_children bigint[], p_told bigint[], p_parents bigint[],
                                                        p_outcomes "char"[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    noted integer;
    cancelled bigint[];
    released bigint[];
    stopping bigint[];
    stopping_steps integer[];
BEGIN
    IF coalesce(cardinality(p_children), 0) = 0 THEN
        RETURN 0;
    END IF;
    SELECT t.noted, t.cancelled, t.released, t.stopping, t.stopping_steps
      INTO noted, cancelled, released, stopping, stopping_steps
      FROM pgtask.workflow_tell_locked(p_children, p_told, p_parents, p_outcomes) t;
    -- Each workflow is cancelled in the name of its first step (by place)
    -- whose failure said so.
    FOR i IN 1 .. cardinality(stopping) LOOP
        PERFORM pgtask.workflow_cancel(stopping[i], stopping_steps[i]);
    END LOOP;
    PERFORM pgtask.workflow_cancel_unstarted(cancelled, true);
    PERFORM pgtask.workflow_release(released);
    RETURN noted;
END;
$$;

-- The edges of steps p_parents not told yet, with p_outcomes (index by
-- index): those whose child's waits row it took (SKIP LOCKED, until the
-- caller's transaction ends) as children, tc, tp and tos, and the others
-- as lc, lp and los, their children left_ids. The edges by their key (see
-- workflow_tell_locked).
CREATE OR REPLACE FUNCTION pgtask.workflow_edges_to_tell(p_parents bigint[], p_outcomes "char"[],
                                                         OUT children bigint[], OUT tc bigint[], OUT tp bigint[],
                                                         OUT tos "char"[], OUT lc bigint[], OUT lp bigint[],
                                                         OUT los "char"[], OUT left_ids bigint[])
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    -- The lateral lock is looked up per edge, by the child's key: its cost
    -- follows the edges told, whatever the plan's estimates.
    WITH edges AS (
        SELECT e.child, e.parent, u.o, k.taken IS NOT NULL AS taken
          FROM unnest(p_parents, p_outcomes) AS u(p, o)
          JOIN pgtask.workflow_edges e ON e.parent = u.p AND e.outcome IS NULL
          LEFT JOIN LATERAL (
              SELECT true AS taken FROM pgtask.workflow_waits w
               WHERE w.job_id = e.child
                 FOR NO KEY UPDATE SKIP LOCKED) k ON true
    )
    SELECT coalesce(array_agg(DISTINCT child) FILTER (WHERE taken), '{}'),
           coalesce(array_agg(child) FILTER (WHERE taken), '{}'),
           coalesce(array_agg(parent) FILTER (WHERE taken), '{}'),
           coalesce(array_agg(o) FILTER (WHERE taken), '{}'),
           coalesce(array_agg(child) FILTER (WHERE NOT taken), '{}'),
           coalesce(array_agg(parent) FILTER (WHERE NOT taken), '{}'),
           coalesce(array_agg(o) FILTER (WHERE NOT taken), '{}'),
           coalesce(array_agg(DISTINCT child) FILTER (WHERE NOT taken), '{}')
      INTO children, tc, tp, tos, lc, lp, los, left_ids
      FROM edges;
END;
$$;

-- Tells the children of steps p_parents their outcomes p_outcomes ('s' or
-- 'f', index by index; see the top of this file): one statement takes the
-- waits rows of all their children that are free, and reads the outcomes
-- to tell; those are applied together (workflow_apply_locked), and the
-- outcomes for the children taken elsewhere are left in notes, with a
-- notification naming them.
CREATE OR REPLACE FUNCTION pgtask.workflow_settle(p_parents bigint[], p_outcomes "char"[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    children bigint[];
    tc bigint[];
    tp bigint[];
    tos "char"[];
    lc bigint[];
    lp bigint[];
    los "char"[];
    left_ids bigint[];
BEGIN
    IF coalesce(cardinality(p_parents), 0) = 0 THEN
        RETURN;
    END IF;
    SELECT e.children, e.tc, e.tp, e.tos, e.lc, e.lp, e.los, e.left_ids
      INTO children, tc, tp, tos, lc, lp, los, left_ids
      FROM pgtask.workflow_edges_to_tell(p_parents, p_outcomes) e;
    IF cardinality(left_ids) > 0 THEN
        INSERT INTO pgtask.workflow_notes (child, parent, outcome)
        SELECT u.c, u.p, u.o FROM unnest(lc, lp, los) AS u(c, p, o);
        -- A payload holds at most 8000 bytes: 300 ids of up to 19 digits.
        FOR i IN 0 .. (cardinality(left_ids) - 1) / 300 LOOP
            PERFORM pg_notify('pgtask_workflow', array_to_string(left_ids[i * 300 + 1 : (i + 1) * 300], ','));
        END LOOP;
    END IF;
    PERFORM pgtask.workflow_apply_locked(children, tc, tp, tos);
END;
$$;

-- Steps p_parents, failed or cancelled earlier, are unfinished again (an
-- operator retried them): their children wait for them again. A child
-- they cancelled is retried as retry_job retries a step, and parked here
-- (workflow_step_repark is kept quiet meanwhile), unless another parent's
-- failure cancelled it too; a child they counted
-- down under policy 'a' counts them again while still parked. A child
-- that ran already is left as it is. Set-based like the cascade: a few
-- statements for all the children of the set, whose own children are
-- told next, as a set. Waits for the children's rows: only operators do
-- this.
CREATE OR REPLACE FUNCTION pgtask.workflow_restore(p_parents bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    uncancelled bigint[];
    freed bigint[];
    again bigint[];
    gq text[] := '{}';
    gk text[] := '{}';
    gfirst bigint[] := '{}';
    gids bigint[] := '{}';
    heads bigint[] := '{}';
    aq text[] := '{}';
    ak text[] := '{}';
    a record;
BEGIN
    IF coalesce(cardinality(p_parents), 0) = 0 THEN
        RETURN;
    END IF;
    -- The children's waits rows, in id order.
    PERFORM 1 FROM pgtask.workflow_waits w
     WHERE w.job_id IN (SELECT e.child FROM unnest(p_parents) AS u(p) JOIN pgtask.workflow_edges e ON e.parent = u.p)
     ORDER BY w.job_id
       FOR NO KEY UPDATE;
    -- An outcome not applied yet is no longer one.
    DELETE FROM pgtask.workflow_notes n
     USING unnest(p_parents) AS u(p)
     JOIN pgtask.workflow_edges e ON e.parent = u.p
     WHERE n.child = e.child AND n.parent = u.p;
    -- A failure under 'c' is no longer one (its child was cancelled, so it
    -- never ran); another outcome is forgotten only by a child still
    -- parked, which counts a success, or a failure under 'a', again.
    WITH x AS MATERIALIZED (
        SELECT e.parent, e.child, e.policy, e.outcome AS old
          FROM unnest(p_parents) AS u(p)
          JOIN pgtask.workflow_edges e ON e.parent = u.p AND e.outcome IS NOT NULL
          JOIN pgtask.workflow_waits w ON w.job_id = e.child
          JOIN pgtask.jobs j ON j.id = e.child
         WHERE (e.policy = 'c' AND e.outcome = 'f') OR (j.status = 'scheduled' AND j.run_after = pgtask.parked_at())
    ), reset AS (
        UPDATE pgtask.workflow_edges e SET outcome = NULL
          FROM x WHERE e.parent = x.parent AND e.child = x.child
    ), up AS (
        SELECT x.child, count(*) AS n FROM x WHERE x.old = 's' OR x.policy = 'a' GROUP BY x.child
    ), counted AS (
        UPDATE pgtask.workflow_waits w SET remaining = w.remaining + up.n
          FROM up WHERE w.job_id = up.child
    )
    SELECT coalesce(array_agg(DISTINCT x.child) FILTER (WHERE x.policy = 'c' AND x.old = 'f'), '{}') INTO uncancelled
      FROM x;
    IF cardinality(uncancelled) = 0 THEN
        RETURN;
    END IF;
    -- Each child those failures cancelled is cancelled by another failed
    -- parent, if any, else by none any more.
    WITH fixed AS (
        UPDATE pgtask.workflow_waits w
           SET cancelled_by = coalesce(
                   (SELECT e.parent FROM pgtask.workflow_edges e
                     WHERE e.parent = w.cancelled_by AND e.child = w.job_id AND e.outcome = 'f' AND e.policy = 'c'),
                   (SELECT min(e.parent) FROM pgtask.workflow_edges e
                     WHERE e.child = w.job_id AND e.outcome = 'f' AND e.policy = 'c'))
         WHERE w.job_id = ANY (uncancelled) AND w.cancelled_by IS NOT NULL
        RETURNING w.job_id, w.cancelled_by
    )
    SELECT coalesce(array_agg(f.job_id ORDER BY f.job_id) FILTER (WHERE f.cancelled_by IS NULL), '{}') INTO freed
      FROM fixed f;
    IF cardinality(freed) = 0 THEN
        RETURN;
    END IF;
    -- Those cancelled by none are retried as retry_job retries them (a
    -- step is never unique nor in a batch), all together, and stay
    -- parked: each waits for the parent whose retry freed it, which a
    -- failure under 'c' never counted down, so the trigger that parks a
    -- retried step (workflow_step_repark) is left quiet. Their children
    -- are told next. The workflows' rows are read FOR SHARE first, as
    -- retry_job reads them.
    PERFORM 1 FROM pgtask.workflows w
     WHERE w.id IN (SELECT j.workflow_id FROM pgtask.jobs j WHERE j.id = ANY (freed))
     ORDER BY w.id
       FOR SHARE;
    -- Their rows, in id order, before any group's: retry_job takes a
    -- step's row before its group's, and the other order would deadlock
    -- with an operator's retry of one of these steps.
    PERFORM 1 FROM pgtask.jobs j WHERE j.id = ANY (freed) ORDER BY j.id FOR UPDATE;
    -- A grouped one takes its place in its group as retry_job's does: the
    -- group's row, locked, has its bound lowered to the group's first step
    -- retried here, and its head stays; a row made here has that first
    -- step as its head and no bound. The rows there are are locked and
    -- bounded first, in (queue, key) order, then the missing ones made (an
    -- enqueue that made one meanwhile finds its bound lowered instead).
    SELECT coalesce(array_agg(s.queue ORDER BY s.queue, s.group_key), '{}'),
           coalesce(array_agg(s.group_key ORDER BY s.queue, s.group_key), '{}'),
           coalesce(array_agg(s.first ORDER BY s.queue, s.group_key), '{}')
      INTO gq, gk, gfirst
      FROM (SELECT j.queue, j.group_key, min(j.id) AS first FROM pgtask.jobs j
             WHERE j.id = ANY (freed) AND j.status = 'cancelled' AND j.group_key IS NOT NULL
             GROUP BY j.queue, j.group_key) s;
    IF cardinality(gq) > 0 THEN
        PERFORM 1 FROM pgtask.queue_groups g
         WHERE (g.queue, g.group_key) IN (SELECT * FROM unnest(gq, gk))
         ORDER BY g.queue, g.group_key
           FOR UPDATE;
        WITH bounded AS (
            UPDATE pgtask.queue_groups g SET pending_from = least(g.pending_from, u.first)
              FROM unnest(gq, gk, gfirst) AS u(q, k, first)
             WHERE g.queue = u.q AND g.group_key = u.k
            RETURNING g.queue, g.group_key, g.id
        ), made AS (
            INSERT INTO pgtask.queue_groups AS g (queue, group_key)
            SELECT u.q, u.k FROM unnest(gq, gk) AS u(q, k)
             WHERE NOT EXISTS (SELECT 1 FROM bounded b WHERE b.queue = u.q AND b.group_key = u.k)
             ORDER BY u.q, u.k
            ON CONFLICT (queue, group_key) DO UPDATE
               SET pending_from = least(g.pending_from,
                                        (SELECT f.first FROM unnest(gq, gk, gfirst) AS f(q, k, first)
                                          WHERE f.q = excluded.queue AND f.k = excluded.group_key))
            RETURNING g.queue, g.group_key, g.id, g.pending_from IS NULL AS fresh
        )
        SELECT coalesce(array_agg(x.id ORDER BY x.queue, x.group_key), '{}'),
               coalesce(array_agg(x.head ORDER BY x.queue, x.group_key), '{}'),
               coalesce(array_agg(x.queue ORDER BY x.queue, x.group_key) FILTER (WHERE x.head IS DISTINCT FROM x.first), '{}'),
               coalesce(array_agg(x.group_key ORDER BY x.queue, x.group_key) FILTER (WHERE x.head IS DISTINCT FROM x.first), '{}')
          INTO gids, heads, aq, ak
          FROM (SELECT r.queue, r.group_key, r.id, u.first,
                       CASE WHEN r.fresh THEN u.first ELSE pgtask.group_head(r.queue, r.group_key, r.id) END AS head
                  FROM (SELECT b.queue, b.group_key, b.id, false AS fresh FROM bounded b
                        UNION ALL
                        SELECT m.queue, m.group_key, m.id, m.fresh FROM made m) r
                  JOIN unnest(gq, gk, gfirst) AS u(q, k, first) ON u.q = r.queue AND u.k = r.group_key) x;
    END IF;
    PERFORM set_config('pgtask.wf_quiet', 'on', true);
    WITH gone AS (
        DELETE FROM pgtask.cancel_requests r WHERE r.job_id = ANY (freed)
    ), progress AS (
        DELETE FROM pgtask.job_progress p WHERE p.job_id = ANY (freed)
    ), groups AS (
        SELECT u.q, u.k, u.gid, u.head FROM unnest(gq, gk, gids, heads) AS u(q, k, gid, head)
    ), retried AS (
        UPDATE pgtask.jobs j
           SET status = 'scheduled', run_after = pgtask.parked_at(), age_due = NULL,
               is_head = CASE WHEN j.group_key IS NULL THEN j.limit_id IS NULL ELSE (j.id = g.head) IS TRUE END,
               group_id = CASE WHEN j.group_key IS NULL THEN j.group_id ELSE g.gid END,
               attempts = 0, snoozes = 0, started_at = NULL, finished_at = NULL, owner_pid = NULL,
               errors = pgtask.append_error(j.errors, jsonb_build_array(jsonb_build_object(
                   'attempt', j.attempts,
                   'error', format('retried by an operator after %s attempt(s); attempts count from 1 again', j.attempts),
                   'at', clock_timestamp(), 'operator_retry', true)))
          FROM pgtask.jobs x
          LEFT JOIN groups g ON g.q = x.queue AND g.k = x.group_key
         WHERE x.id = ANY (freed) AND j.id = x.id AND j.status = 'cancelled'
        RETURNING j.id
    )
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}') INTO again FROM retried r;
    PERFORM set_config('pgtask.wf_quiet', 'off', true);
    -- A group whose head is not a step retried here moves on if its head
    -- finished or is gone, as after retry_job: one call per queue.
    FOR a IN
        SELECT u.q, array_agg(u.k) AS keys FROM unnest(aq, ak) AS u(q, k) GROUP BY u.q ORDER BY u.q
    LOOP
        PERFORM pgtask.advance_group_set(a.q, a.keys, NULL);
    END LOOP;
    PERFORM pgtask.workflow_steps_changed(again, 'r');
END;
$$;

-- Queues entries p_entries ("id:o,id:o,...") for workflow_work_queue. The
-- queue is kept in this transaction's settings, in chunks of about 4 kB
-- (pgtask.wf_q1, pgtask.wf_q2, ..., pgtask.wf_qn the last one in use), so
-- that a call costs the copy of one chunk and its entries, not of the
-- whole queue: a cascade through thousands of steps stays linear in their
-- number.
CREATE OR REPLACE FUNCTION pgtask.workflow_queue_add(p_entries text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('pgtask.wf_qn', true), '')::integer, 0);
    cur text;
BEGIN
    IF n > 0 THEN
        cur := current_setting('pgtask.wf_q' || n, true);
    END IF;
    IF n = 0 OR octet_length(cur) > 4000 THEN
        n := n + 1;
        cur := NULL;
        PERFORM set_config('pgtask.wf_qn', n::text, true);
    END IF;
    PERFORM set_config('pgtask.wf_q' || n, concat_ws(',', nullif(cur, ''), p_entries), true);
END;
$$;

-- Takes the whole queue of workflow_queue_add, in order, leaving it
-- empty; NULL when it is empty.
CREATE OR REPLACE FUNCTION pgtask.workflow_queue_take() RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('pgtask.wf_qn', true), '')::integer, 0);
    out text[] := '{}';
BEGIN
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. n LOOP
        out := out || string_to_array(nullif(current_setting('pgtask.wf_q' || i, true), ''), ',');
        PERFORM set_config('pgtask.wf_q' || i, '', true);
    END LOOP;
    PERFORM set_config('pgtask.wf_qn', '0', true);
    RETURN out;
END;
$$;

-- Works off the queue of steps whose outcome was left while another was
-- being applied, or while a batch of outcomes was recorded (see the top
-- of this file): "id:o" entries, o 's' or 'f' (tell the children) or 'r'
-- (retried: restore them). Each round takes the whole queue, one level of
-- a cascade, and tells it as one set.
CREATE OR REPLACE FUNCTION pgtask.workflow_work_queue() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q text[];
    ids bigint[];
    outs "char"[];
    restored bigint[];
BEGIN
    LOOP
        q := pgtask.workflow_queue_take();
        EXIT WHEN q IS NULL;
        SELECT coalesce(array_agg(split_part(e, ':', 1)::bigint ORDER BY n) FILTER (WHERE split_part(e, ':', 2) <> 'r'), '{}'),
               coalesce(array_agg(split_part(e, ':', 2)::"char" ORDER BY n) FILTER (WHERE split_part(e, ':', 2) <> 'r'), '{}'),
               coalesce(array_agg(split_part(e, ':', 1)::bigint ORDER BY n) FILTER (WHERE split_part(e, ':', 2) = 'r'), '{}')
          INTO ids, outs, restored
          FROM unnest(q) WITH ORDINALITY AS x(e, n);
        -- (Only operators retry, and only they may restore.)
        IF cardinality(restored) > 0 THEN
            PERFORM pgtask.workflow_restore(restored);
        END IF;
        IF cardinality(ids) > 0 THEN
            PERFORM pgtask.workflow_settle(ids, outs);
        END IF;
    END LOOP;
END;
$$;

-- The outcomes of steps a batch of outcomes recorded (settle_jobs turns
-- pgtask.wf_defer on, and queues its successes' steps itself; the
-- triggers of its failures only queue theirs), told now, together. Turns
-- the deferring off.
CREATE OR REPLACE FUNCTION pgtask.workflow_settle_deferred() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('pgtask.wf_defer', 'off', true);
    IF coalesce(nullif(current_setting('pgtask.wf_qn', true), ''), '0') = '0' THEN
        RETURN;
    END IF;
    PERFORM set_config('pgtask.wf_busy', 'on', true);
    PERFORM pgtask.workflow_work_queue();
    PERFORM set_config('pgtask.wf_busy', 'off', true);
END;
$$;

-- Runs, or queues while outcomes are being told already (or while
-- settle_jobs records a batch of outcomes), what the change of steps p_ids
-- means for their children (p_what 's', 'f' or 'r'), as one set.
CREATE OR REPLACE FUNCTION pgtask.workflow_steps_changed(p_ids bigint[], p_what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_ids), 0) = 0 THEN
        RETURN;
    END IF;
    IF current_setting('pgtask.wf_busy', true) = 'on' OR current_setting('pgtask.wf_defer', true) = 'on' THEN
        PERFORM pgtask.workflow_queue_add(array_to_string(ARRAY(SELECT u || ':' || p_what FROM unnest(p_ids) AS u), ','));
        RETURN;
    END IF;
    PERFORM set_config('pgtask.wf_busy', 'on', true);
    IF p_what = 'r' THEN
        PERFORM pgtask.workflow_restore(p_ids);
    ELSE
        PERFORM pgtask.workflow_settle(p_ids, array_fill(p_what::"char", ARRAY[cardinality(p_ids)]));
    END IF;
    -- What the changes it made queued: a cascade, one level at a time.
    PERFORM pgtask.workflow_work_queue();
    PERFORM set_config('pgtask.wf_busy', 'off', true);
END;
$$;

-- The AFTER UPDATE and AFTER DELETE triggers on jobs (see 0001_baseline.sql):
-- a step finished, or was deleted unfinished.
CREATE OR REPLACE FUNCTION pgtask.workflow_step_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.workflow_steps_changed(ARRAY[OLD.id],
        CASE WHEN TG_OP = 'UPDATE' AND NEW.status = 'succeeded' THEN 's' ELSE 'f' END);
    RETURN NULL;
END;
$$;

-- The AFTER UPDATE trigger on jobs: a finished step is unfinished again.
CREATE OR REPLACE FUNCTION pgtask.workflow_step_again() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.workflow_steps_changed(ARRAY[OLD.id], 'r');
    RETURN NULL;
END;
$$;

-- The BEFORE UPDATE trigger on jobs: a finished step made unfinished (an
-- operator's retry) stays parked while its parents do not allow it to run:
-- some have not succeeded, or a failure cancelled it.
CREATE OR REPLACE FUNCTION pgtask.workflow_step_repark() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgtask.workflow_waits w
                WHERE w.job_id = NEW.id AND (w.remaining > 0 OR w.cancelled_by IS NOT NULL)) THEN
        NEW.status := 'scheduled';
        NEW.run_after := pgtask.parked_at();
        NEW.age_due := NULL;
    END IF;
    RETURN NEW;
END;
$$;

-- Cancels workflow p_workflow (the failure of its step p_failed_step, from
-- 0, whose edge says so, or an operator: NULL): marks it, recording which
-- (cancelled_by_step), so that no step of it is released any more, and
-- cancels its unfinished steps: those not started at once (one locked now
-- is left to maintenance, see cancel_pending_workflows), those running
-- through a cancel request to their worker (see cancel_job). Returns
-- whether it marked it (false: cancelled already, or no such workflow).
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel(p_workflow bigint, p_failed_step integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgtask.workflows
       SET cancelled_at = clock_timestamp(), cancelled_by_step = p_failed_step, cancel_pending = true
     WHERE id = p_workflow AND cancelled_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgtask.workflow_cancel_steps(p_workflow);
    RETURN true;
END;
$$;

-- Cancels what it can of cancelled workflow p_workflow's unfinished steps
-- without ever waiting, in a few statements for all of them. Its pending
-- steps are read once; of those not started then, the group rows of the
-- queued grouped ones, then the steps' rows, are taken with SKIP LOCKED,
-- and checked again as they are locked: a parked step released meanwhile
-- is cancelled as a queued one, if its group's row is ours. Every other
-- step of that one read is read again after: one started by then (before
-- the cancel, or claimed since) is asked to stop (see cancel_job), in the
-- name of the workflow's cause (see cancel_requests.cause), with a
-- notification to its worker each (one per running step, so bounded by
-- the workflow's concurrency); one still not started, whose rows another
-- transaction holds (an operator, a finisher that released it, a claim
-- about to run it), is left over, for maintenance
-- (cancel_pending_workflows). Returns how many steps it left over; at 0
-- the workflow's cancel is done.
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel_steps(p_workflow bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    pending bigint[];
    unstarted bigint[];
    gq text[];
    gk text[];
    mine bigint[];
    running bigint[];
    running_attempts integer[];
    left_over integer;
BEGIN
    -- One read of the steps to cancel: whatever becomes of each later, it
    -- is looked at again below.
    SELECT coalesce(array_agg(j.id ORDER BY j.id), '{}'),
           coalesce(array_agg(j.id ORDER BY j.id) FILTER (WHERE j.status <> 'started'), '{}')
      INTO pending, unstarted
      FROM pgtask.jobs j
     WHERE j.workflow_id = p_workflow AND pgtask.job_pending(j.status);
    -- The group rows first, as cancel_job takes them; a parked step needs
    -- none (see workflow_cancel_unstarted).
    SELECT coalesce(array_agg(g.queue), '{}'), coalesce(array_agg(g.group_key), '{}') INTO gq, gk
      FROM (SELECT g.queue, g.group_key FROM pgtask.queue_groups g
             WHERE (g.queue, g.group_key) IN (
                   SELECT j.queue, j.group_key FROM pgtask.jobs j
                    WHERE j.id = ANY (unstarted) AND j.status IN ('scheduled', 'queued') AND j.group_key IS NOT NULL
                      AND NOT (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()))
             ORDER BY g.queue, g.group_key
               FOR UPDATE SKIP LOCKED) g;
    -- The steps not started, as of their lock: a step locked elsewhere,
    -- one whose group's row is not ours, or one started since, is not
    -- taken here.
    SELECT coalesce(array_agg(l.id), '{}') INTO mine
      FROM (SELECT j.id FROM pgtask.jobs j
             WHERE j.id = ANY (unstarted)
               AND j.status IN ('scheduled', 'queued')
               AND (j.group_key IS NULL OR (j.status = 'scheduled' AND j.run_after = pgtask.parked_at())
                    OR (j.queue, j.group_key) IN (SELECT * FROM unnest(gq, gk)))
             ORDER BY j.id
               FOR UPDATE SKIP LOCKED) l;
    -- Their rows are ours: cancelled as cancel_job cancels them, together.
    PERFORM pgtask.workflow_cancel_unstarted(mine, false);
    -- All the others, read again in one statement: those started (before
    -- the cancel, or since the read above) are asked to stop; those still
    -- not started are left over; those finished meanwhile need nothing.
    WITH others AS MATERIALIZED (
        SELECT j.id, j.status, j.attempts FROM pgtask.jobs j
         WHERE j.id = ANY (pending) AND j.id <> ALL (mine) AND pgtask.job_pending(j.status)
    ), asked AS (
        INSERT INTO pgtask.cancel_requests (job_id, attempt, cause)
        SELECT o.id, o.attempts,
               (SELECT CASE WHEN w.cancelled_by_step IS NULL THEN 'workflow' ELSE 'step:' || w.cancelled_by_step END
                  FROM pgtask.workflows w WHERE w.id = p_workflow)
          FROM others o WHERE o.status = 'started'
            ON CONFLICT (job_id) DO NOTHING
    )
    SELECT coalesce(array_agg(o.id) FILTER (WHERE o.status = 'started'), '{}'),
           coalesce(array_agg(o.attempts) FILTER (WHERE o.status = 'started'), '{}'),
           count(*) FILTER (WHERE o.status <> 'started')
      INTO running, running_attempts, left_over
      FROM others o;
    PERFORM pg_notify('pgtask_cancel', u.id::text || ':' || u.a::text) FROM unnest(running, running_attempts) AS u(id, a);
    IF left_over = 0 THEN
        UPDATE pgtask.workflows SET cancel_pending = false WHERE id = p_workflow AND cancel_pending;
    END IF;
    RETURN left_over;
END;
$$;

-- Maintenance: applies the notes of up to p_limit children, all together
-- under their waits rows' locks, taken with SKIP LOCKED (a child locked
-- now keeps its notes for whoever holds it, or a later round), p_children's
-- only when not NULL (a notification named them). Returns how many notes
-- it applied.
CREATE OR REPLACE FUNCTION pgtask.apply_workflow_notes(p_children bigint[], p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    locked bigint[];
    n integer;
BEGIN
    SELECT coalesce(array_agg(w.job_id), '{}') INTO locked
      FROM (SELECT w.job_id FROM pgtask.workflow_waits w
             WHERE w.job_id IN (SELECT DISTINCT x.child FROM pgtask.workflow_notes x
                                 WHERE p_children IS NULL OR x.child = ANY (p_children)
                                 ORDER BY x.child
                                 LIMIT p_limit)
             ORDER BY w.job_id
               FOR NO KEY UPDATE SKIP LOCKED) w;
    IF cardinality(locked) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM set_config('pgtask.wf_busy', 'on', true);
    n := pgtask.workflow_apply_locked(locked, '{}', '{}', '{}');
    PERFORM pgtask.workflow_work_queue();
    PERFORM set_config('pgtask.wf_busy', 'off', true);
    RETURN n;
END;
$$;

-- Maintenance: goes on cancelling the steps of up to p_limit cancelled
-- workflows that it could not cancel at once. Returns how many workflows
-- still have some.
CREATE OR REPLACE FUNCTION pgtask.cancel_pending_workflows(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    w bigint;
    n integer := 0;
BEGIN
    FOR w IN
        SELECT id FROM pgtask.workflows WHERE cancel_pending ORDER BY id LIMIT p_limit FOR UPDATE SKIP LOCKED
    LOOP
        IF pgtask.workflow_cancel_steps(w) > 0 THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END;
$$;

-- An operator's cancel of workflow p_id (see workflow_cancel).
CREATE OR REPLACE FUNCTION pgtask.cancel_workflow(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.require_read_committed('cancelling a workflow');
    RETURN pgtask.workflow_cancel(p_id, NULL);
END;
$$;

-- Retention: deletes up to p_limit workflows created more than
-- p_older_than_ms ago none of whose jobs is left (retention deleted them
-- all), with their edges, waits and notes. Returns how many.
CREATE OR REPLACE FUNCTION pgtask.delete_finished_workflows(p_older_than_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    doomed bigint[];
BEGIN
    SELECT coalesce(array_agg(w.id), '{}') INTO doomed
      FROM (SELECT w.id FROM pgtask.workflows w
             WHERE w.created_at < clock_timestamp() - p_older_than_ms * interval '1 millisecond'
               AND NOT EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.workflow_id = w.id)
             ORDER BY w.id
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) w;
    IF cardinality(doomed) = 0 THEN
        RETURN 0;
    END IF;
    DELETE FROM pgtask.workflow_notes n USING pgtask.workflow_waits w
     WHERE w.workflow_id = ANY (doomed) AND n.child = w.job_id;
    -- Every edge's child has a waits row: the edges are found through
    -- them, by child.
    DELETE FROM pgtask.workflow_edges e USING pgtask.workflow_waits w
     WHERE w.workflow_id = ANY (doomed) AND e.child = w.job_id;
    DELETE FROM pgtask.workflow_waits WHERE workflow_id = ANY (doomed);
    DELETE FROM pgtask.workflows WHERE id = ANY (doomed);
    RETURN cardinality(doomed);
END;
$$;

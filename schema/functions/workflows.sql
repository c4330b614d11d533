-- revision: 6
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
-- A failure cancels the children whose edge says so; their own finish (a
-- cancel) tells their children in turn. That cascade runs in a loop, not by
-- triggers nested in triggers: while a step's outcome is being applied
-- (pgtask.wf_busy), the triggers of the steps it changes only queue their
-- ids (see workflow_queue_add), and the outermost trigger works the queue
-- off, one level at a time, so a chain of any length costs no stack.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Makes a workflow of the jobs pgtask.enqueue_jobs just inserted in the
-- same statement (see InsertWorkflow in queries/enqueue.sql): p_ids are
-- their ids in step order, p_existed whether each was inserted; edge i
-- makes step p_children[i] (1-based) wait for step p_parents[i], with the
-- policy p_policies[i] ('c', 'a' or 'w'). Every parent comes before its
-- child, which rules out cycles, and a step has parents if and only if it
-- was enqueued parked. Returns the workflow's id.
--
-- It runs as its owner, like enqueue_jobs, so that a producer role makes
-- workflows without any privilege on the tables; so it takes in only jobs
-- that the caller's login enqueued in this transaction, in no workflow yet.
CREATE OR REPLACE FUNCTION pgtask.create_workflow(p_ids bigint[], p_existed boolean[], p_name text,
                                                  p_parents integer[], p_children integer[], p_policies text[]) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgtask, pg_temp
AS $$
DECLARE
    n integer := coalesce(cardinality(p_ids), 0);
    ne integer := coalesce(cardinality(p_parents), 0);
    wid bigint;
    taken integer;
BEGIN
    IF n = 0 THEN
        RAISE EXCEPTION 'pgtask.create_workflow: a workflow needs at least one step' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_existed) <> n OR true = ANY (p_existed) THEN
        RAISE EXCEPTION 'pgtask.create_workflow: every step of a workflow must be new (no unique keys)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(cardinality(p_children), 0) <> ne OR coalesce(cardinality(p_policies), 0) <> ne THEN
        RAISE EXCEPTION 'pgtask.create_workflow: the edges'' lists differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_parents, p_children, p_policies) AS e(p, c, pol)
                WHERE e.p IS NULL OR e.c IS NULL OR e.p < 1 OR e.c > n OR e.p >= e.c OR e.pol IS NULL OR e.pol NOT IN ('c', 'a', 'w')) THEN
        RAISE EXCEPTION 'pgtask.create_workflow: an edge names no step, or a step after its child, or no policy' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT count(DISTINCT (e.p, e.c)) FROM unnest(p_parents, p_children) AS e(p, c)) <> ne THEN
        RAISE EXCEPTION 'pgtask.create_workflow: an edge is listed twice' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgtask.workflows (name, steps, edges) VALUES (p_name, n, ne) RETURNING id INTO wid;
    -- Which steps have parents, by one hash join of the steps with the
    -- children (not a look through the edges for each step).
    UPDATE pgtask.jobs j SET workflow_id = wid
      FROM (SELECT i.id, k.c IS NOT NULL AS has_parents
              FROM unnest(p_ids) WITH ORDINALITY AS i(id, n)
              LEFT JOIN (SELECT DISTINCT c FROM unnest(p_children) AS c) k ON k.c = i.n) s
     WHERE j.id = s.id AND j.workflow_id IS NULL AND j.batch_id IS NULL
       AND j.enqueued_by = session_user AND j.created_at = now()
       AND (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) = s.has_parents;
    GET DIAGNOSTICS taken = ROW_COUNT;
    IF taken <> n OR (SELECT count(DISTINCT u) FROM unnest(p_ids) u) <> n THEN
        RAISE EXCEPTION 'pgtask.create_workflow: a step is not a job this transaction enqueued, or is in a workflow or batch already, or is parked without parents (or has parents and is not parked)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgtask.workflow_edges (workflow_id, parent, child, step, policy)
    SELECT wid, p_ids[e.p], p_ids[e.c], e.p - 1, e.pol::"char"
      FROM unnest(p_parents, p_children, p_policies) AS e(p, c, pol);
    INSERT INTO pgtask.workflow_waits (job_id, workflow_id, remaining)
    SELECT p_ids[e.c], wid, count(*)
      FROM unnest(p_children) AS e(c)
     GROUP BY e.c;
    RETURN wid;
END;
$$;

-- Makes parked step p_id runnable: due now, its wait for a better priority
-- counted from now, and announced: left for the claim that follows in this
-- transaction when it is of the queue that claim is for (see settle_jobs),
-- else on pgtask_behind. A limited step waits for a slot of its key (a
-- check of it, which maintenance applies). A step of a cancelled workflow
-- is cancelled instead. Returns whether it released it.
--
-- The workflow's row is read FOR SHARE and stays so until this
-- transaction ends: a cancel in flight (which holds the row updated until
-- its commit) is waited for and seen, and a cancel that comes after waits
-- for this release to commit, then finds the step released (see
-- workflow_cancel_steps). So no step is released after its workflow's
-- cancel committed.
CREATE OR REPLACE FUNCTION pgtask.workflow_release(p_id bigint, p_workflow bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    head boolean;
    lim bigint;
    cancelled timestamptz;
BEGIN
    SELECT w.cancelled_at INTO cancelled FROM pgtask.workflows w WHERE w.id = p_workflow FOR SHARE;
    IF cancelled IS NOT NULL THEN
        PERFORM pgtask.workflow_cancel_parked(p_id);
        RETURN false;
    END IF;
    UPDATE pgtask.jobs j
       SET status = 'queued', run_after = clock_timestamp(),
           age_due = CASE WHEN j.aging_ms > 0 AND j.priority > 0
                          THEN clock_timestamp() + j.aging_ms * interval '1 millisecond' END
     WHERE j.id = p_id AND j.status = 'scheduled' AND j.run_after = pgtask.parked_at()
    RETURNING j.queue, j.is_head, j.limit_id INTO q, head, lim;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF lim IS NOT NULL THEN
        INSERT INTO pgtask.limit_checks (key_id) VALUES (lim);
    ELSIF head THEN
        IF current_setting('pgtask.claiming', true) = 'on' AND current_setting('pgtask.settling', true) = q THEN
            PERFORM set_config('pgtask.promoted',
                               concat_ws(',', nullif(current_setting('pgtask.promoted', true), ''), p_id::text), true);
        ELSE
            PERFORM pg_notify('pgtask_behind', p_id || ':' || q);
        END IF;
    END IF;
    RETURN true;
END;
$$;

-- Cancels parked step p_id (one that waits for its parents), as an
-- operator's cancel would: a grouped head lets its group move on. Its own
-- children hear of it through the trigger (see the top of this file).
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel_parked(p_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    k text;
    head boolean;
BEGIN
    UPDATE pgtask.jobs j
       SET status = 'cancelled', finished_at = clock_timestamp(),
           is_head = (j.is_head AND j.group_key IS NOT NULL)
     WHERE j.id = p_id AND j.status = 'scheduled' AND j.run_after = pgtask.parked_at()
    RETURNING j.queue, j.group_key, j.is_head INTO q, k, head;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgtask_finished', p_id::text);
    IF k IS NOT NULL AND head THEN
        -- An enqueue in flight into the group leaves it to maintenance
        -- (advance_finished_groups), as for a worker.
        PERFORM pgtask.advance_group_set(q, ARRAY[k], NULL);
    END IF;
    RETURN true;
END;
$$;

-- Applies parent p_parent's outcome p_outcome ('s' or 'f') to child
-- p_child, whose waits row the caller holds locked: once per edge (an
-- edge told already is left alone). A success, or a failure under policy
-- 'a', counts the child's wait down and releases it at 0 unless a failure
-- cancelled it; a failure under 'c' cancels the child, under 'w' the whole
-- workflow.
CREATE OR REPLACE FUNCTION pgtask.workflow_apply(p_child bigint, p_parent bigint, p_outcome "char") RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    pol "char";
    w pgtask.workflow_waits;
BEGIN
    UPDATE pgtask.workflow_edges e SET outcome = p_outcome
     WHERE e.parent = p_parent AND e.child = p_child AND e.outcome IS NULL
    RETURNING e.policy INTO pol;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_outcome = 's' OR pol = 'a' THEN
        UPDATE pgtask.workflow_waits SET remaining = remaining - 1 WHERE job_id = p_child
        RETURNING * INTO w;
        IF w.remaining = 0 AND w.cancelled_by IS NULL THEN
            PERFORM pgtask.workflow_release(p_child, w.workflow_id);
        END IF;
    ELSIF pol = 'c' THEN
        UPDATE pgtask.workflow_waits SET cancelled_by = p_parent WHERE job_id = p_child AND cancelled_by IS NULL
        RETURNING * INTO w;
        PERFORM pgtask.workflow_cancel_parked(p_child);
    ELSE
        SELECT * INTO w FROM pgtask.workflow_waits WHERE job_id = p_child;
        PERFORM pgtask.workflow_cancel(w.workflow_id);
    END IF;
END;
$$;

-- Applies the outcomes of parents p_parents (p_outcomes, index by index)
-- to child p_child, whose waits row the caller holds locked, as
-- workflow_apply does one by one: the failures first (a cancel wins over
-- a release), then the successes together, with one update of the
-- child's waits row.
CREATE OR REPLACE FUNCTION pgtask.workflow_apply_many(p_child bigint, p_parents bigint[], p_outcomes "char"[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    k integer;
    w pgtask.workflow_waits;
BEGIN
    FOR f IN SELECT u.p FROM unnest(p_parents, p_outcomes) AS u(p, o) WHERE u.o = 'f' ORDER BY u.p LOOP
        PERFORM pgtask.workflow_apply(p_child, f.p, 'f');
    END LOOP;
    WITH told AS (
        UPDATE pgtask.workflow_edges e SET outcome = 's'
          FROM unnest(p_parents, p_outcomes) AS u(p, o)
         WHERE u.o = 's' AND e.parent = u.p AND e.child = p_child AND e.outcome IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO k FROM told;
    IF k = 0 THEN
        RETURN;
    END IF;
    UPDATE pgtask.workflow_waits SET remaining = remaining - k WHERE job_id = p_child
    RETURNING * INTO w;
    IF w.remaining = 0 AND w.cancelled_by IS NULL THEN
        PERFORM pgtask.workflow_release(p_child, w.workflow_id);
    END IF;
END;
$$;

-- Applies the notes left for child p_child (see workflow_notes), whose
-- waits row the caller holds locked, deleting them as it applies them.
-- Returns how many.
CREATE OR REPLACE FUNCTION pgtask.workflow_apply_notes_of(p_child bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    ps bigint[];
    os "char"[];
BEGIN
    WITH gone AS (
        DELETE FROM pgtask.workflow_notes WHERE child = p_child RETURNING parent, outcome
    )
    SELECT coalesce(array_agg(parent), '{}'), coalesce(array_agg(outcome), '{}') INTO ps, os FROM gone;
    IF cardinality(ps) > 0 THEN
        PERFORM pgtask.workflow_apply_many(p_child, ps, os);
    END IF;
    RETURN cardinality(ps);
END;
$$;

-- Tells the children of steps p_parents their outcomes p_outcomes ('s' or
-- 'f', index by index; see the top of this file): each child's outcomes
-- together, at once where its waits row is free, else in notes, with a
-- notification naming the children left so.
CREATE OR REPLACE FUNCTION pgtask.workflow_settle(p_parents bigint[], p_outcomes "char"[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    left_ids bigint[] := '{}';
BEGIN
    FOR c IN
        SELECT e.child, array_agg(e.parent) AS ps, array_agg(u.o) AS os
          FROM unnest(p_parents, p_outcomes) AS u(p, o)
          JOIN pgtask.workflow_edges e ON e.parent = u.p AND e.outcome IS NULL
         GROUP BY e.child
         ORDER BY e.child
    LOOP
        PERFORM 1 FROM pgtask.workflow_waits WHERE job_id = c.child FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM pgtask.workflow_apply_many(c.child, c.ps, c.os);
            PERFORM pgtask.workflow_apply_notes_of(c.child);
        ELSE
            INSERT INTO pgtask.workflow_notes (child, parent, outcome)
            SELECT c.child, u.p, u.o FROM unnest(c.ps, c.os) AS u(p, o);
            left_ids := left_ids || c.child;
        END IF;
    END LOOP;
    -- A payload holds at most 8000 bytes: 300 ids of up to 19 digits.
    FOR i IN 0 .. (cardinality(left_ids) - 1) / 300 LOOP
        EXIT WHEN cardinality(left_ids) = 0;
        PERFORM pg_notify('pgtask_workflow', array_to_string(left_ids[i * 300 + 1 : (i + 1) * 300], ','));
    END LOOP;
END;
$$;

-- Step p_parent, failed or cancelled earlier, is unfinished again (an
-- operator retried it): its children wait for it again. A child it
-- cancelled is retried (and stays parked, see workflow_step_repark) unless
-- another parent's failure cancelled it too; a child it counted down under
-- policy 'a' counts it again while still parked. A child that ran already
-- is left as it is. Waits for the children's rows: only operators do this.
CREATE OR REPLACE FUNCTION pgtask.workflow_restore(p_parent bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    e record;
    w pgtask.workflow_waits;
    old "char";
    parked boolean;
    st pgtask.job_status;
    other bigint;
BEGIN
    FOR e IN
        SELECT child, policy FROM pgtask.workflow_edges WHERE parent = p_parent ORDER BY child
    LOOP
        SELECT * INTO w FROM pgtask.workflow_waits WHERE job_id = e.child FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;
        -- An outcome not applied yet is no longer one.
        DELETE FROM pgtask.workflow_notes WHERE child = e.child AND parent = p_parent;
        SELECT j.status, (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()) INTO st, parked
          FROM pgtask.jobs j WHERE j.id = e.child;
        CONTINUE WHEN NOT FOUND;
        SELECT outcome INTO old FROM pgtask.workflow_edges WHERE parent = p_parent AND child = e.child;
        CONTINUE WHEN old IS NULL;
        IF e.policy = 'c' AND old = 'f' AND w.cancelled_by = p_parent THEN
            UPDATE pgtask.workflow_edges SET outcome = NULL WHERE parent = p_parent AND child = e.child;
            SELECT x.parent INTO other FROM pgtask.workflow_edges x
             WHERE x.child = e.child AND x.outcome = 'f' AND x.policy = 'c' AND x.parent <> p_parent
             LIMIT 1;
            UPDATE pgtask.workflow_waits SET cancelled_by = other WHERE job_id = e.child;
            IF other IS NULL AND st = 'cancelled' THEN
                PERFORM pgtask.retry_job(e.child);
            END IF;
        ELSIF parked THEN
            UPDATE pgtask.workflow_edges SET outcome = NULL WHERE parent = p_parent AND child = e.child;
            IF old = 's' OR e.policy = 'a' THEN
                UPDATE pgtask.workflow_waits SET remaining = remaining + 1 WHERE job_id = e.child;
            END IF;
        END IF;
    END LOOP;
END;
$$;

-- Queues entry p_entry ("id:o") for workflow_work_queue. The queue is
-- kept in this transaction's settings, in chunks of about 4 kB
-- (pgtask.wf_q1, pgtask.wf_q2, ..., pgtask.wf_qn the last one in use), so
-- that an entry costs the copy of one chunk, not of the whole queue: a
-- cascade through thousands of steps stays linear in their number.
CREATE OR REPLACE FUNCTION pgtask.workflow_queue_add(p_entry text) RETURNS void
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
    PERFORM set_config('pgtask.wf_q' || n, concat_ws(',', nullif(cur, ''), p_entry), true);
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

-- Works off the queue of steps whose outcome the triggers left while
-- another was being applied, or while a batch of outcomes was recorded
-- (see the top of this file): "id:o" entries, o 's' or 'f' (tell the
-- children, each round's together) or 'r' (retried: restore them).
CREATE OR REPLACE FUNCTION pgtask.workflow_work_queue() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q text[];
    ids bigint[];
    outs "char"[];
    restored bigint[];
    r bigint;
BEGIN
    LOOP
        q := pgtask.workflow_queue_take();
        EXIT WHEN q IS NULL;
        SELECT coalesce(array_agg(split_part(e, ':', 1)::bigint ORDER BY n) FILTER (WHERE split_part(e, ':', 2) <> 'r'), '{}'),
               coalesce(array_agg(split_part(e, ':', 2)::"char" ORDER BY n) FILTER (WHERE split_part(e, ':', 2) <> 'r'), '{}'),
               coalesce(array_agg(split_part(e, ':', 1)::bigint ORDER BY n) FILTER (WHERE split_part(e, ':', 2) = 'r'), '{}')
          INTO ids, outs, restored
          FROM unnest(q) WITH ORDINALITY AS x(e, n);
        FOREACH r IN ARRAY restored LOOP
            PERFORM pgtask.workflow_restore(r);
        END LOOP;
        IF cardinality(ids) > 0 THEN
            PERFORM pgtask.workflow_settle(ids, outs);
        END IF;
    END LOOP;
END;
$$;

-- The outcomes of steps a batch of outcomes recorded (settle_jobs turns
-- pgtask.wf_defer on, and the triggers only queue them), told now, each
-- child's together. Turns the deferring off.
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

-- Runs, or queues while one runs already (or while settle_jobs records a
-- batch of outcomes), what step p_id's change means for its children
-- (p_what 's', 'f' or 'r').
CREATE OR REPLACE FUNCTION pgtask.workflow_step_changed(p_id bigint, p_what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pgtask.wf_busy', true) = 'on' OR current_setting('pgtask.wf_defer', true) = 'on' THEN
        PERFORM pgtask.workflow_queue_add(p_id || ':' || p_what);
        RETURN;
    END IF;
    PERFORM set_config('pgtask.wf_busy', 'on', true);
    IF p_what = 'r' THEN
        PERFORM pgtask.workflow_restore(p_id);
    ELSE
        PERFORM pgtask.workflow_settle(ARRAY[p_id], ARRAY[p_what::"char"]);
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
    PERFORM pgtask.workflow_step_changed(OLD.id,
        CASE WHEN TG_OP = 'UPDATE' AND NEW.status = 'succeeded' THEN 's' ELSE 'f' END);
    RETURN NULL;
END;
$$;

-- The AFTER UPDATE trigger on jobs: a finished step is unfinished again.
CREATE OR REPLACE FUNCTION pgtask.workflow_step_again() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.workflow_step_changed(OLD.id, 'r');
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

-- Cancels workflow p_workflow (a failure whose edge says so, or an
-- operator): marks it, so that no step of it is released any more, and
-- cancels its unfinished steps: those not started at once (one locked now
-- is left to maintenance, see cancel_pending_workflows), those running
-- through a cancel request to their worker (see cancel_job). Returns
-- whether it marked it (false: cancelled already, or no such workflow).
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel(p_workflow bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgtask.workflows SET cancelled_at = clock_timestamp(), cancel_pending = true
     WHERE id = p_workflow AND cancelled_at IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgtask.workflow_cancel_steps(p_workflow);
    RETURN true;
END;
$$;

-- Cancels what it can of cancelled workflow p_workflow's unfinished steps
-- without ever waiting: a step's row, and a queued step's group row, are
-- taken with SKIP LOCKED, and a step whose rows another transaction holds
-- (an operator, a finisher that released it, a claim about to run it) is
-- left over, for maintenance (cancel_pending_workflows). Each step is read
-- again once locked: a parked step may have been released meanwhile, and
-- is then cancelled as a queued one. Running steps are asked to stop (see
-- cancel_job). Returns how many steps it left over; at 0 the workflow's
-- cancel is done.
CREATE OR REPLACE FUNCTION pgtask.workflow_cancel_steps(p_workflow bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    j pgtask.jobs;
    grouped boolean;
    left_over integer := 0;
BEGIN
    FOR s IN
        SELECT x.id FROM pgtask.jobs x
         WHERE x.workflow_id = p_workflow AND pgtask.job_pending(x.status)
         ORDER BY x.id
    LOOP
        -- As of now, not of the loop's start.
        SELECT * INTO j FROM pgtask.jobs WHERE id = s.id;
        CONTINUE WHEN NOT FOUND OR NOT pgtask.job_pending(j.status);
        IF j.status = 'started' THEN
            INSERT INTO pgtask.cancel_requests (job_id, attempt) VALUES (j.id, j.attempts)
                ON CONFLICT (job_id) DO NOTHING;
            PERFORM pg_notify('pgtask_cancel', j.id::text || ':' || j.attempts::text);
            CONTINUE;
        END IF;
        -- The group's row first, as cancel_job takes them; a parked step
        -- needs none (see workflow_cancel_parked).
        grouped := j.group_key IS NOT NULL AND NOT (j.status = 'scheduled' AND j.run_after = pgtask.parked_at());
        IF grouped THEN
            PERFORM 1 FROM pgtask.queue_groups
              WHERE queue = j.queue AND group_key = j.group_key
                FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                left_over := left_over + 1;
                CONTINUE;
            END IF;
        END IF;
        SELECT * INTO j FROM pgtask.jobs WHERE id = s.id FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            left_over := left_over + 1;
            CONTINUE;
        END IF;
        CONTINUE WHEN NOT pgtask.job_pending(j.status);
        IF j.status = 'started' THEN
            INSERT INTO pgtask.cancel_requests (job_id, attempt) VALUES (j.id, j.attempts)
                ON CONFLICT (job_id) DO NOTHING;
            PERFORM pg_notify('pgtask_cancel', j.id::text || ':' || j.attempts::text);
        ELSIF j.status = 'scheduled' AND j.run_after = pgtask.parked_at() THEN
            PERFORM pgtask.workflow_cancel_parked(j.id);
        ELSIF j.group_key IS NOT NULL AND NOT grouped THEN
            -- Released since it was read: its group's row is not ours.
            left_over := left_over + 1;
        ELSE
            -- Its rows are ours: cancel_job waits for nothing.
            PERFORM pgtask.cancel_job(j.id);
        END IF;
    END LOOP;
    IF left_over = 0 THEN
        UPDATE pgtask.workflows SET cancel_pending = false WHERE id = p_workflow AND cancel_pending;
    END IF;
    RETURN left_over;
END;
$$;

-- Maintenance: applies the notes of up to p_limit children (each under its
-- waits row's lock, taken with SKIP LOCKED: a child locked now keeps its
-- notes for whoever holds it, or a later round), p_children's only when not
-- NULL (a notification named them). Returns how many notes it applied.
CREATE OR REPLACE FUNCTION pgtask.apply_workflow_notes(p_children bigint[], p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    c bigint;
    n integer := 0;
BEGIN
    FOR c IN
        SELECT DISTINCT x.child FROM pgtask.workflow_notes x
         WHERE p_children IS NULL OR x.child = ANY (p_children)
         ORDER BY x.child
         LIMIT p_limit
    LOOP
        PERFORM 1 FROM pgtask.workflow_waits WHERE job_id = c FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        PERFORM set_config('pgtask.wf_busy', 'on', true);
        n := n + pgtask.workflow_apply_notes_of(c);
        PERFORM pgtask.workflow_work_queue();
        PERFORM set_config('pgtask.wf_busy', 'off', true);
    END LOOP;
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
    RETURN pgtask.workflow_cancel(p_id);
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
    DELETE FROM pgtask.workflow_edges WHERE workflow_id = ANY (doomed);
    DELETE FROM pgtask.workflow_waits WHERE workflow_id = ANY (doomed);
    DELETE FROM pgtask.workflows WHERE id = ANY (doomed);
    RETURN cardinality(doomed);
END;
$$;

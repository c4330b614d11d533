-- revision: 9
-- Groups: moving a group on to its next job once its head has finished.
--
-- Grouped jobs run one at a time per (queue, group_key), in id order. Only a
-- group's head (is_head) may be claimed. A head that finishes stays marked
-- until its group is advanced: the next pending job becomes the head, or the
-- group's row goes away. Group rows are locked like this:
--   - enqueueing takes a shared lock (FOR KEY SHARE) on an existing group's
--     row, or inserts the row, and keeps it until its transaction commits;
--     enqueuers never wait for each other on an existing group;
--   - advancing takes the row exclusively, but only with SKIP LOCKED: a group
--     with an enqueue in flight is left for a moment later, since its new job
--     is not visible yet. Advancing never waits for a lock held by someone who
--     might wait for it, so enqueueing and working cannot deadlock.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- The head of the group whose row has id p_group_id: the job of it marked
-- is_head, finished, blocking or pending, or NULL when it has none (a DELETE
-- removed it). Each state is looked up in its own index, a finished head
-- first: a group is advanced once its head has finished, and the index of
-- pending jobs holds the group's whole backlog, whose rows a lookup there
-- would read one by one (is_head is not in that index) before finding no
-- pending head. The workers' path does not need this: a worker knows which
-- head it finished (see advance_one_group). The finished heads' index keeps
-- an entry for every head that finished marked, until vacuum can remove it,
-- so this costs more the more jobs the group ran while a transaction was
-- held open; it serves busy groups tried again, operators' changes,
-- maintenance and the dashboard.
CREATE OR REPLACE FUNCTION pgtask.group_head(p_queue text, p_group_key text, p_group_id bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT id FROM pgtask.jobs
          WHERE queue = p_queue AND group_key = p_group_key AND group_key IS NOT NULL AND is_head
            AND pgtask.job_releases_group(status, fail_blocks_group) AND group_id = p_group_id
          LIMIT 1),
        (SELECT id FROM pgtask.jobs
          WHERE queue = p_queue AND group_key = p_group_key
            AND pgtask.job_blocks_group(status, fail_blocks_group) AND is_head AND group_id = p_group_id
          LIMIT 1),
        (SELECT id FROM pgtask.jobs
          WHERE group_id = p_group_id AND pgtask.job_pending(status) AND is_head
          LIMIT 1));
$$;

-- Moves groups of a queue on where their head has finished: in each, the
-- next pending job becomes the head, or the group's row goes away. A head
-- that is pending, running or blocking (failed with fail_blocks_group)
-- stays. A job that ran behind the head in the same run (see claim_jobs) and
-- failed for good with fail_blocks_group becomes the head and blocks the
-- group. p_heads, index by index with p_group_keys, may name the head each
-- group had (a job that just finished, or one a DELETE removed); a NULL or
-- missing element has it looked up (group_head). A named head that is no
-- longer marked was moved on from already. Returns the keys it left alone
-- because an enqueue into them was in flight (see the top of this file);
-- the caller tries those again later.
--
-- The group's row is locked, not changed: the head is the job marked
-- is_head, and the next one is looked for from the old head's id on (see
-- pending_from in 0001_baseline.sql). A row rewritten with every job would
-- leave a version behind each time, and while another session keeps a
-- transaction open, every lookup of the row would step over all of them.
--
-- Set-based, so a batch's groups cost a few statements together. The
-- statements after the lock take new snapshots (the function is volatile),
-- so they see every job committed before the locks were taken. Pending jobs
-- are read without locking them: cancel_job and retry_job lock the group
-- first, and nothing else changes a pending job of a group in a way that
-- matters here.
CREATE OR REPLACE FUNCTION pgtask.advance_group_set(p_queue text, p_group_keys text[], p_heads bigint[])
RETURNS text[]
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    locked text[];
    locked_ids bigint[];
    locked_rows tid[];
    named bigint[];
    locked_froms bigint[];
    busy text[];
    finished text[];
    finished_ids bigint[];
    finished_rows tid[];
    old_heads bigint[];
    froms bigint[];
    first_runnable bigint;
BEGIN
    PERFORM pgtask.require_read_committed('advancing a group');
    -- Each group's row is looked up by its key, one key at a time (a
    -- lateral subquery, which the planner keeps as a loop over the keys).
    -- Compared as group_key = ANY (keys), the generic plan read every group
    -- row of the table and compared it with every key; joined to the keys,
    -- it read the queue's whole part of the primary key and hashed it. Both
    -- grow with the queue's groups.
    SELECT coalesce(array_agg(l.group_key ORDER BY l.group_key), '{}'), coalesce(array_agg(l.id ORDER BY l.group_key), '{}'),
           coalesce(array_agg(l.row_tid ORDER BY l.group_key), '{}'), coalesce(array_agg(u.h ORDER BY l.group_key), '{}'),
           coalesce(array_agg(l.pending_from ORDER BY l.group_key), '{}')
      INTO locked, locked_ids, locked_rows, named, locked_froms
      FROM (SELECT x.k, max(x.h) AS h FROM unnest(p_group_keys, p_heads) AS x(k, h)
             WHERE x.k IS NOT NULL GROUP BY x.k ORDER BY x.k) u
     CROSS JOIN LATERAL (
           SELECT g.group_key, g.id, g.ctid AS row_tid, g.pending_from FROM pgtask.queue_groups g
            WHERE g.queue = p_queue AND g.group_key = u.k
              FOR UPDATE SKIP LOCKED) l;
    SELECT coalesce(array_agg(g.group_key), '{}') INTO busy
      FROM (SELECT DISTINCT k FROM unnest(p_group_keys) k WHERE k <> ALL (locked)) u
     CROSS JOIN LATERAL (
           SELECT q.group_key FROM pgtask.queue_groups q
            WHERE q.queue = p_queue AND q.group_key = u.k
            LIMIT 1) g;

    -- The rows are locked: their tids stay theirs until this transaction
    -- changes them, so the statements below find them by tid. The function
    -- runs with enable_seqscan off: with statistics taken while the tables
    -- were small, the planner judged a scan of every row cheaper than
    -- fetching the few it needs by tid or id.
    SELECT coalesce(array_agg(u.k), '{}'), coalesce(array_agg(u.gid), '{}'), coalesce(array_agg(u.row_tid), '{}'),
           coalesce(array_agg(h.head), '{}'), coalesce(array_agg(u.from_id), '{}')
      INTO finished, finished_ids, finished_rows, old_heads, froms
      FROM unnest(locked, locked_ids, locked_rows, named, locked_froms) AS u(k, gid, row_tid, named_head, from_id)
     CROSS JOIN LATERAL (SELECT coalesce(u.named_head, pgtask.group_head(p_queue, u.k, u.gid)) AS head) h
      LEFT JOIN pgtask.jobs j ON j.id = h.head
     WHERE j.id IS NULL OR (j.is_head AND pgtask.job_releases_group(j.status, j.fail_blocks_group));
    IF cardinality(finished) = 0 THEN
        RETURN busy;
    END IF;
    UPDATE pgtask.jobs SET is_head = false WHERE id = ANY (old_heads) AND is_head;

    -- The next unfinished job, from the old head's id on, or from
    -- pending_from when that is lower (see 0001_baseline.sql); or before
    -- both when there is none from there (see move_group_on). A started one
    -- (left by a lost session, to be requeued) takes its place at the head
    -- like any other. array_agg keeps NULLs, so the arrays line up.
    WITH runs AS (
        -- A job out of the group's order waits, but a run claimed with the
        -- old head may still be in flight: its next job takes the head (see
        -- move_group_on).
        SELECT f.*,
               CASE WHEN f.from_id IS NOT NULL THEN
                   (SELECT r.id FROM pgtask.jobs r
                     WHERE r.claim_token = (SELECT h.claim_token FROM pgtask.jobs h WHERE h.id = f.head)
                       AND r.status = 'started' AND r.group_id = f.gid AND r.id > f.head
                     ORDER BY r.id LIMIT 1)
               END AS run_id
          FROM unnest(finished, finished_ids, finished_rows, old_heads, froms) AS f(k, gid, row_tid, head, from_id)
    ), nxt AS (
        SELECT f.k, f.head, f.row_tid, f.from_id, f.run_id,
               coalesce(f.run_id,
                        (SELECT id FROM pgtask.jobs
                          WHERE group_id = f.gid AND pgtask.job_pending(status)
                            AND id >= coalesce(least(f.head, f.from_id), 0)
                          ORDER BY id LIMIT 1),
                        (SELECT id FROM pgtask.jobs
                          WHERE least(f.head, f.from_id) IS NOT NULL AND group_id = f.gid AND pgtask.job_pending(status)
                          ORDER BY id LIMIT 1)) AS next_id
          FROM runs f
    ), chosen AS (
        SELECT nxt.k, nxt.next_id, nxt.row_tid, nxt.from_id, nxt.run_id,
               coalesce((SELECT id FROM pgtask.jobs
                          WHERE queue = p_queue AND group_key = nxt.k
                            AND pgtask.job_blocks_group(status, fail_blocks_group)
                            AND id > coalesce(nxt.head, 0) AND (nxt.next_id IS NULL OR id < nxt.next_id)
                          ORDER BY id LIMIT 1), nxt.next_id) AS id
          FROM nxt
    ), promoted AS (
        UPDATE pgtask.jobs j SET is_head = true
          FROM chosen c WHERE j.id = c.id
        RETURNING j.id, j.status
    ), passed AS (
        -- The new head is at or below every pending job: no bound below it
        -- is needed any more.
        UPDATE pgtask.queue_groups g SET pending_from = NULL
          FROM chosen c
         WHERE g.ctid = ANY (finished_rows) AND g.ctid = c.row_tid AND c.id IS NOT NULL AND c.from_id IS NOT NULL
           AND c.run_id IS NULL
    ), emptied AS (
        DELETE FROM pgtask.queue_groups g
         USING chosen c
         WHERE g.ctid = ANY (finished_rows) AND g.ctid = c.row_tid AND c.id IS NULL
    )
    SELECT min(id) FILTER (WHERE status = 'queued') INTO first_runnable FROM promoted;
    IF first_runnable IS NOT NULL THEN
        -- With the first such head's id: workers look behind their cursors
        -- from there, not from the start.
        PERFORM pg_notify('pgtask_behind', first_runnable || ':' || p_queue);
    END IF;
    RETURN busy;
END;
$$;

-- advance_group_set for one group, as a worker calls it after finishing
-- p_head, the group's head: the same rules and locks, in statements simple
-- enough that their plans are made once per session, so one group costs a
-- fraction of the set's price. Returns false when an enqueue into the group
-- was in flight. With p_notify false it sends no wake-up for a head it makes
-- runnable, but leaves its id for the claim that follows in the same
-- transaction (see pick_heads), which takes it first and wakes workers for
-- it only if it has no room left.
CREATE OR REPLACE FUNCTION pgtask.advance_one_group(p_queue text, p_group_key text, p_head bigint, p_notify boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    head record;
BEGIN
    PERFORM pgtask.require_read_committed('advancing a group');
    SELECT id, pending_from INTO g FROM pgtask.queue_groups
     WHERE queue = p_queue AND group_key = p_group_key
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Busy when the row is there but locked by an enqueue in flight.
        RETURN NOT EXISTS (SELECT 1 FROM pgtask.queue_groups WHERE queue = p_queue AND group_key = p_group_key);
    END IF;
    SELECT is_head, status, fail_blocks_group INTO head FROM pgtask.jobs WHERE id = p_head;
    IF FOUND AND NOT (head.is_head AND pgtask.job_releases_group(head.status, head.fail_blocks_group)) THEN
        RETURN true; -- the head has not finished, or the group moved on from it already
    END IF;
    UPDATE pgtask.jobs SET is_head = false WHERE id = p_head AND is_head;
    PERFORM pgtask.move_group_on(p_queue, p_group_key, g.id, p_head, g.pending_from, p_notify);
    RETURN true;
END;
$$;

-- The rest of advance_one_group, for a caller that holds the group's row
-- locked (FOR UPDATE) and has unmarked its finished head p_old_head: the
-- next job becomes the head, or the group's row goes away. settle_jobs
-- calls it directly when it could lock the row before recording its head's
-- success, which then unmarks the head in the same update. The group's row
-- is changed only when it goes, or when its pending_from (p_pending_from)
-- is passed.
CREATE OR REPLACE FUNCTION pgtask.move_group_on(p_queue text, p_group_key text, p_group_id bigint,
                                                p_old_head bigint, p_pending_from bigint, p_notify boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    next_id bigint;
    chosen bigint;
    promoted pgtask.job_status;
    bound bigint := least(p_old_head, p_pending_from);
    in_run boolean := false;
BEGIN
    IF p_pending_from IS NOT NULL THEN
        -- A job out of the group's order waits (an operator retried it, or
        -- an enqueue joined the group late). But a run claimed with the old
        -- head (see pick_runs) may still be in flight: its next job takes
        -- the head, and the waiting job runs after the run's end. The run's
        -- jobs are the started ones of the old head's claim.
        SELECT r.id INTO next_id FROM pgtask.jobs r
         WHERE r.claim_token = (SELECT h.claim_token FROM pgtask.jobs h WHERE h.id = p_old_head)
           AND r.status = 'started' AND r.group_id = p_group_id AND r.id > p_old_head
         ORDER BY r.id LIMIT 1;
        in_run := next_id IS NOT NULL;
    END IF;
    IF NOT in_run THEN
        SELECT id INTO next_id FROM pgtask.jobs
         WHERE group_id = p_group_id AND pgtask.job_pending(status) AND id >= coalesce(bound, 0)
         ORDER BY id LIMIT 1;
    END IF;
    IF next_id IS NULL AND bound IS NOT NULL THEN
        -- Nothing from the bound on. A job below it is still possible: an
        -- enqueue that created the group's row raced with another that
        -- created it first, and joined it with ids taken earlier. Before the
        -- group's row goes, the whole group is looked at once more.
        SELECT id INTO next_id FROM pgtask.jobs
         WHERE group_id = p_group_id AND pgtask.job_pending(status)
         ORDER BY id LIMIT 1;
    END IF;
    SELECT id INTO chosen FROM pgtask.jobs
     WHERE queue = p_queue AND group_key = p_group_key
       AND pgtask.job_blocks_group(status, fail_blocks_group)
       AND id > coalesce(p_old_head, 0) AND (next_id IS NULL OR id < next_id)
     ORDER BY id LIMIT 1;
    chosen := coalesce(chosen, next_id);
    IF chosen IS NULL THEN
        DELETE FROM pgtask.queue_groups WHERE queue = p_queue AND group_key = p_group_key;
        RETURN;
    END IF;
    UPDATE pgtask.jobs SET is_head = true WHERE id = chosen RETURNING status INTO promoted;
    IF p_pending_from IS NOT NULL AND NOT in_run THEN
        -- The new head is at or below every pending job: no bound below it
        -- is needed any more.
        UPDATE pgtask.queue_groups SET pending_from = NULL WHERE queue = p_queue AND group_key = p_group_key;
    END IF;
    IF promoted = 'queued' THEN
        IF p_notify THEN
            PERFORM pg_notify('pgtask_behind', chosen || ':' || p_queue);
        ELSE
            PERFORM set_config('pgtask.promoted',
                               concat_ws(',', nullif(current_setting('pgtask.promoted', true), ''), chosen), true);
        END IF;
    END IF;
END;
$$;

-- advance_group_set for one group: false when an enqueue into it was in flight.
CREATE OR REPLACE FUNCTION pgtask.advance_group(p_queue text, p_group_key text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT cardinality(pgtask.advance_group_set(p_queue, ARRAY[p_group_key], NULL)) = 0;
$$;

-- Advances groups of a queue and returns the keys it could not advance yet
-- because an enqueue into them was in flight. With p_patience_ms above zero
-- it retries those for up to that long, holding no group lock while it
-- waits. A worker calls it without patience inside its job transaction,
-- then with some patience after committing.
CREATE OR REPLACE FUNCTION pgtask.advance_groups(p_queue text, p_group_keys text[], p_patience_ms integer)
RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    busy text[];
    deadline timestamptz := clock_timestamp() + p_patience_ms * interval '1 millisecond';
BEGIN
    SELECT coalesce(array_agg(DISTINCT g), '{}') INTO busy
      FROM unnest(p_group_keys) g WHERE g IS NOT NULL;
    LOOP
        busy := pgtask.advance_group_set(p_queue, busy, NULL);
        IF cardinality(busy) = 0 OR clock_timestamp() >= deadline THEN
            RETURN busy;
        END IF;
        PERFORM pg_sleep(0.002);
    END LOOP;
END;
$$;

-- Advances each group (p_queues and p_group_keys, index by index) as
-- advance_group does, and returns how many moved on. A group that cannot
-- move on because a row it has to change breaks a check the table was
-- given NOT VALID after the row was stored is left as it is (see
-- unwritable_row), and the others move on: the groups are advanced all at
-- once, and only when that fails on such a row, each in a subtransaction of
-- its own (many subtransactions in one transaction slow every session's
-- snapshots down).
CREATE OR REPLACE FUNCTION pgtask.advance_each_group(p_queues text[], p_group_keys text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    moved integer := 0;
    bad text;
BEGIN
    BEGIN
        FOR g IN SELECT u.q, u.k FROM unnest(p_queues, p_group_keys) AS u(q, k) LOOP
            IF pgtask.advance_group(g.q, g.k) THEN
                moved := moved + 1;
            END IF;
        END LOOP;
        RETURN moved;
    EXCEPTION WHEN integrity_constraint_violation THEN
        moved := 0;
    END;
    FOR g IN SELECT u.q, u.k FROM unnest(p_queues, p_group_keys) AS u(q, k) LOOP
        BEGIN
            IF pgtask.advance_group(g.q, g.k) THEN
                moved := moved + 1;
            END IF;
        EXCEPTION WHEN integrity_constraint_violation THEN
            GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
            PERFORM pgtask.unwritable_row(format('group %s of queue %s not moved on', g.k, g.q), bad);
        END;
    END LOOP;
    RETURN moved;
END;
$$;

-- Advances groups whose head finished but that did not move on: their worker
-- died before it could, or an enqueue was in flight every time it tried;
-- and groups whose head was deleted while they were busy (stale_groups).
-- Returns how many groups moved on. A group that cannot move on because a
-- row it has to change cannot be written is left as it is (see
-- advance_each_group), and the others move on.
CREATE OR REPLACE FUNCTION pgtask.advance_finished_groups(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    moved integer;
    bad text;
BEGIN
    SELECT pgtask.advance_each_group(coalesce(array_agg(f.queue), '{}'), coalesce(array_agg(f.group_key), '{}'))
      INTO moved
      FROM (SELECT DISTINCT queue, group_key FROM pgtask.jobs
             WHERE is_head AND group_key IS NOT NULL
               AND pgtask.job_releases_group(status, fail_blocks_group)
             LIMIT p_limit) f;
    -- Groups whose head a DELETE removed while they were busy: few, each in
    -- a subtransaction.
    FOR g IN
        SELECT queue, group_key FROM pgtask.stale_groups
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    LOOP
        BEGIN
            IF pgtask.advance_group(g.queue, g.group_key) THEN
                DELETE FROM pgtask.stale_groups WHERE queue = g.queue AND group_key = g.group_key;
                moved := moved + 1;
            END IF;
        EXCEPTION WHEN integrity_constraint_violation THEN
            GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
            PERFORM pgtask.unwritable_row(format('group %s of queue %s not moved on', g.group_key, g.queue), bad);
        END;
    END LOOP;
    RETURN moved;
END;
$$;

-- When heads are deleted (an operator's DELETE of finished jobs, or of a
-- group's pending head), their groups would point at a row that is gone,
-- and no worker would ever look at them again. So the deleting statement
-- advances them as a worker does, with SKIP LOCKED; a group it cannot lock
-- now (an enqueue or an advance in flight) is recorded in stale_groups for
-- maintenance (advance_finished_groups) to move on. It never waits for a
-- group's lock while holding the deleted rows' locks, which an advancing
-- worker may be waiting for. The triggers are created by 0001_baseline.sql.
CREATE OR REPLACE FUNCTION pgtask.advance_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    busy text[];
BEGIN
    FOR g IN
        SELECT queue, array_agg(group_key ORDER BY group_key) AS keys, array_agg(id ORDER BY group_key) AS heads
          FROM gone
         WHERE is_head AND group_key IS NOT NULL
         GROUP BY queue
         ORDER BY queue
    LOOP
        busy := pgtask.advance_group_set(g.queue, g.keys, g.heads);
        INSERT INTO pgtask.stale_groups (queue, group_key)
        SELECT g.queue, k FROM unnest(busy) k
        ON CONFLICT DO NOTHING;
    END LOOP;
    -- The deleted jobs' progress goes with them (it has no foreign key: see
    -- pgtask.job_progress).
    DELETE FROM pgtask.job_progress p USING gone WHERE p.job_id = gone.id;
    RETURN NULL;
END;
$$;

-- TRUNCATE of the jobs leaves no group with work: their rows go too, and
-- every limit's slots are free.
CREATE OR REPLACE FUNCTION pgtask.forget_groups_after_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgtask.queue_groups;
    DELETE FROM pgtask.stale_groups;
    DELETE FROM pgtask.job_progress;
    -- No job holds a slot of any limit now.
    DELETE FROM pgtask.limit_checks;
    UPDATE pgtask.limit_keys SET free = max_running WHERE free <> max_running;
    RETURN NULL;
END;
$$;

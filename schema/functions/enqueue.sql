-- revision: 1
-- Enqueueing: inserting jobs and creating or share-locking their groups.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Share-locks the rows of the given groups (FOR KEY SHARE) and returns their
-- ids in the order of the input, NULL for a group without a row. See
-- enqueue_jobs. The locks are taken in no particular order: a key-share lock
-- waits only for a row's deleter or its FOR UPDATE holder, and none of those
-- holds one group's row while it waits for another's (advancing locks with
-- SKIP LOCKED, an operator's change locks a single group), so the order of
-- an enqueue's locks cannot close a cycle. Sorting them cost as much as
-- taking them.
CREATE OR REPLACE FUNCTION pgtask.share_lock_groups(p_queues text[], p_group_keys text[]) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    n integer := coalesce(cardinality(p_queues), 0);
    found_ids bigint[];
    found_at bigint[];
    aligned bigint[];
BEGIN
    SELECT array_agg(l.id ORDER BY l.ord), array_agg(l.ord ORDER BY l.ord) INTO found_ids, found_at
      FROM (SELECT qg.id, w.ord FROM pgtask.queue_groups qg
              JOIN unnest(p_queues, p_group_keys) WITH ORDINALITY AS w(q, k, ord)
                ON qg.queue = w.q AND qg.group_key = w.k
               FOR KEY SHARE OF qg) l;
    -- Each input group matches one row at most, so all found means aligned.
    IF coalesce(cardinality(found_ids), 0) = n THEN
        RETURN found_ids;
    END IF;
    aligned := array_fill(NULL::bigint, ARRAY[n]);
    FOR i IN 1 .. coalesce(cardinality(found_ids), 0) LOOP
        aligned[found_at[i]] := found_ids[i];
    END LOOP;
    RETURN aligned;
END;
$$;

-- Inserts a batch of jobs and returns their ids, in input order. A job is
-- its payload, its group and its settings. The caller lists each distinct
-- set of settings once (p_kinds to p_delay_us, index by index) and the
-- batch's groups once each (p_group_queues, p_group_keys); every job gives
-- the 1-based position of its settings (p_settings) and of its group
-- (p_groups, 0 for an ungrouped job). A grouped job's queue must be its
-- group's. A batch usually has one set of settings, so most of what is sent
-- and read is the payloads.
--
-- Every group of the batch has its row share-locked (FOR KEY SHARE) until
-- the caller commits, so that no worker decides the group is empty while
-- these jobs are invisible to it; a group without a row gets one, with the
-- batch's first job of it as head. The common case, every group already
-- present, costs one locking statement and one insert. Missing rows are
-- inserted in one statement, in (queue, key) order: an enqueue waits for
-- another only on a row that one inserted, and both insert in the same
-- order, so enqueues do not deadlock each other. When a row the insert found
-- present is gone by the time it is locked (its group drained meanwhile),
-- the attempt is undone, releasing the rows it inserted, and made again.
--
-- Workers listening on the channel "pgtask" are woken, at commit, for each
-- queue that got a job it can run now.
--
-- Its statements use generic plans, planned once per session: none depends
-- on the batch's size (none joins two of the batch's arrays), and a generic
-- plan reads the array arguments in place. A custom plan would copy them into
-- every plan as constants, and each lookup in such a text array walks it from
-- its start.
CREATE OR REPLACE FUNCTION pgtask.enqueue_jobs(
    p_payloads jsonb[], p_settings integer[], p_groups integer[],
    p_kinds text[], p_queues text[], p_priorities smallint[], p_max_attempts integer[],
    p_fail_blocks_group boolean[], p_run_at text[], p_delay_us bigint[],
    p_group_queues text[], p_group_keys text[]
) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    n integer := coalesce(cardinality(p_payloads), 0);
    ns integer := coalesce(cardinality(p_kinds), 0);
    ng integer := coalesce(cardinality(p_group_keys), 0);
    ids bigint[];
    -- The groups' row ids, in the order of p_group_keys.
    gids bigint[];
    -- Each group's first job in the batch, in the order of p_group_keys.
    firsts bigint[];
    -- When each set of settings starts its jobs, in the order of p_kinds.
    starts timestamptz[];
    -- Some group rows were created here, so some jobs may be their group's head.
    created boolean := false;
    bad integer;
    used integer;
BEGIN
    IF n = 0 THEN
        RETURN '{}';
    END IF;
    IF cardinality(p_settings) IS DISTINCT FROM n OR cardinality(p_groups) IS DISTINCT FROM n
       OR coalesce(cardinality(p_queues), 0) <> ns OR coalesce(cardinality(p_priorities), 0) <> ns
       OR coalesce(cardinality(p_max_attempts), 0) <> ns OR coalesce(cardinality(p_fail_blocks_group), 0) <> ns
       OR coalesce(cardinality(p_run_at), 0) <> ns OR coalesce(cardinality(p_delay_us), 0) <> ns
       OR coalesce(cardinality(p_group_queues), 0) <> ng THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: the argument arrays differ in length';
    END IF;
    IF NOT (pgtask.is_list(p_kinds) AND pgtask.is_list(p_queues) AND pgtask.is_list(p_priorities)
            AND pgtask.is_list(p_max_attempts) AND pgtask.is_list(p_fail_blocks_group)
            AND pgtask.is_list(p_run_at) AND pgtask.is_list(p_delay_us)
            AND pgtask.is_list(p_group_queues) AND pgtask.is_list(p_group_keys)) THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: settings and groups must be one-dimensional arrays indexed from 1';
    END IF;
    IF array_position(p_run_at, NULL) IS NOT NULL OR array_position(p_delay_us, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: run_at and delay_us must not be NULL';
    END IF;
    SELECT count(*) FILTER (WHERE u.o IS NULL OR u.o < 1 OR u.o > ns
                               OR u.g IS NULL OR u.g < 0 OR u.g > ng
                               OR (u.g > 0 AND p_queues[u.o] IS DISTINCT FROM p_group_queues[u.g])),
           count(DISTINCT u.g) FILTER (WHERE u.g > 0)
      INTO bad, used
      FROM (SELECT unnest(p_settings) AS o, unnest(p_groups) AS g) u;
    IF bad > 0 THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: % job(s) name no listed settings, or no listed group of their queue', bad;
    END IF;
    IF used < ng THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: % listed group(s) have no job', ng - used;
    END IF;
    -- The same expression decides each job's status and whether to wake workers.
    SELECT array_agg(CASE WHEN s.run_at <> '' THEN s.run_at::timestamptz
                          WHEN s.delay_us <> 0 THEN now() + s.delay_us * interval '1 microsecond'
                          ELSE now() END ORDER BY s.ord)
      INTO starts
      FROM unnest(p_run_at, p_delay_us) WITH ORDINALITY AS s(run_at, delay_us, ord);

    SELECT array_agg(nextval('pgtask.jobs_id_seq'::regclass)) INTO ids FROM generate_series(1, n);

    IF ng > 0 THEN
        gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
        IF array_position(gids, NULL) IS NOT NULL THEN
            created := true;
            SELECT array_agg(f.first_id ORDER BY f.g) INTO firsts
              FROM (SELECT u.g, min(u.id) AS first_id
                      FROM (SELECT unnest(p_groups) AS g, unnest(ids) AS id) u
                     WHERE u.g > 0 GROUP BY u.g) f;
            LOOP
                BEGIN
                    -- Missing groups, each with its first job; a group listed
                    -- twice is inserted with the earlier of its first jobs.
                    INSERT INTO pgtask.queue_groups (queue, group_key, head_id)
                    SELECT w.q, w.k, w.first_id
                      FROM unnest(p_group_queues, p_group_keys, firsts, gids) AS w(q, k, first_id, gid)
                     WHERE w.gid IS NULL
                     ORDER BY w.q COLLATE "C", w.k COLLATE "C", w.first_id
                    ON CONFLICT (queue, group_key) DO NOTHING;
                    gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
                    EXIT WHEN array_position(gids, NULL) IS NULL;
                    RAISE EXCEPTION USING ERRCODE = 'PGT01';
                EXCEPTION WHEN SQLSTATE 'PGT01' THEN
                    -- Undone; see what is there now and try again.
                    gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
                END;
            END LOOP;
        END IF;
    END IF;

    -- A grouped job is its group's head only if this call created the group
    -- with it; the probe runs only then. (A subscript of 0 is NULL.)
    INSERT INTO pgtask.jobs (
        id, queue, kind, group_key, group_id, is_head, status, priority, payload,
        max_attempts, fail_blocks_group, run_after
    )
    SELECT t.id, t.q, p_kinds[t.o], p_group_keys[t.g], gids[t.g],
           t.g = 0 OR (created AND EXISTS (
               SELECT 1 FROM pgtask.queue_groups qg
                WHERE qg.queue = t.q AND qg.group_key = p_group_keys[t.g] AND qg.head_id = t.id)),
           CASE WHEN t.run_after > now() THEN 'scheduled'::pgtask.job_status
                ELSE 'queued'::pgtask.job_status END,
           p_priorities[t.o], t.payload, p_max_attempts[t.o], p_fail_blocks_group[t.o], t.run_after
      FROM (SELECT u.id, u.o, u.g, u.payload, p_queues[u.o] AS q, starts[u.o] AS run_after
              -- unnest in the select list zips the arrays without
              -- materialising them as a table function would.
              FROM (SELECT unnest(ids) AS id, unnest(p_settings) AS o, unnest(p_groups) AS g,
                           unnest(p_payloads) AS payload) u) t;

    -- Wake workers of queues that got a runnable head: an ungrouped job, or
    -- a new group's first job, due now. A spare wake-up costs one empty claim.
    PERFORM pg_notify('pgtask', w.q)
       FROM (SELECT DISTINCT p_queues[u.o] AS q
               FROM (SELECT unnest(p_settings) AS o, unnest(p_groups) AS g) u
              WHERE (u.g = 0 OR created) AND starts[u.o] <= now()) w;
    RETURN ids;
END;
$$;

-- revision: 17
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
-- queue that got a job it can run now, if some runner of the queue may be
-- idle (the payload: the queue's first new job's id, a colon, the queue). A transaction that notifies holds the database's notify lock from
-- its commit's start to its end, so notifying enqueues commit one at a
-- time; while every runner is busy, the next claim of one finds the job
-- anyway, and the enqueue does not notify. See the wake-up lock classes in
-- 0001_baseline.sql: the enqueue holds its queue's enqueue lock, shared,
-- until it commits, and then looks for the queue's idle lock. A runner
-- going idle has its listener take the idle lock first; a runner then
-- claims again at once, and again each time some of the enqueues that held
-- their lock before it are done: an enqueue that found no idle lock has
-- committed by the first claim, or its end wakes another.
--
-- Its statements use generic plans, planned once per session: none depends
-- on the batch's size (none joins two of the batch's arrays), and a generic
-- plan reads the array arguments in place. A custom plan would copy them into
-- every plan as constants, and each lookup in such a text array walks it from
-- its start.
--
-- Unique jobs (p_unique_keys, one per job, NULL or empty for none; p_unique_windows_us
-- and p_unique_statuses, a comma-separated list of statuses, per set of
-- settings): a job's key is its kind and its key, and, with a window, the
-- window of that length its transaction began in (by the database's clock).
-- A job whose key a job holds already (its status is one of that job's
-- unique_statuses), or an earlier job of the batch has, is not inserted: its
-- id is that job's, and job_existed says so. A key no committed job holds is
-- locked (advisory, until commit) before it is inserted, so that a
-- concurrent enqueue of it waits and then finds this one's job; at most
-- 1000 such keys per batch.
--
-- p_aging_ms, per set of settings, is how long a job waits for each level
-- its priority rises (0: it keeps its priority); see age_priorities.
--
-- p_metadata is each job's metadata (a JSON object of strings, or NULL for
-- none), or NULL for a batch without any.
--
-- Fair queues (see functions/fair.sql): p_fair names each job's tenant by
-- its position in p_fair_queues/p_fair_tenants (0: none), or is NULL for
-- none in the batch. A job that names one makes its queue fair; every job
-- of a fair queue gets a tenant ('' for none named) and a turn.
--
-- Concurrency limits (see functions/limits.sql): the batch's limits are
-- listed once each (p_limit_queues, p_limit_keys, with the limit the tasks
-- declare in p_limit_max), and every job gives the 1-based position of its
-- limit (p_limits, 0 for none; NULL for a batch without any). A limited
-- job is never grouped, and its queue is its limit's. Each key's row is
-- created, or locked with SKIP LOCKED; the batch's jobs due now take its
-- free slots, by priority then place in the batch, and the others wait.
-- When the row is locked by someone else, all of them wait, and the key is
-- left to maintenance to look at (pgtask.limit_checks) once this commits.
-- The keys are handled in (queue, key) order, and nobody waits for a key's
-- row but for another's insert of it, or for an enqueue of a key with a
-- strategy (below).
--
-- p_limit_strategies, per listed limit (NULL: all 'queue'), says what
-- becomes of the batch's jobs due now that find no free slot:
--   queue          they wait (the default);
--   cancel_newest  they are inserted cancelled;
--   keep_oldest    the first of them waits if the key has no job waiting
--                  yet; the others are inserted cancelled;
--   keep_newest    the last of them waits, and the key's jobs waiting
--                  until now are cancelled, as are the batch's others (a
--                  debounce).
-- A key with a strategy is decided under its row's lock, waited for: a
-- concurrent enqueue of it then sees this one's jobs. Jobs cancelled so
-- have an error entry that says why; their waiters (WaitJobs) learn it.
--
-- Rate limits (see functions/rates.sql): the batch's rate keys are listed
-- once each (p_rate_queues, p_rate_keys, with the rate the tasks declare:
-- p_rate_n jobs per p_rate_period_us, bursts of p_rate_burst), and every
-- job gives the 1-based position of its key (p_rates, 0 for none; NULL for
-- a batch without any). A rate-limited job is never grouped nor limited,
-- and its queue is its key's. It takes no token here: it waits, and a
-- claim takes a token when it starts it. Each key's row is created (with a
-- full bucket), or locked with SKIP LOCKED, and marked ready for the jobs
-- due now; when someone else holds it, the key is left to maintenance
-- (pgtask.rate_checks) once this commits.
--
-- A job over the size limits (a payload over 8 MiB, metadata over 16 KiB)
-- fails the batch with SQLSTATE 54000 (program_limit_exceeded), metadata
-- that is not an object of strings with 22023 (invalid_parameter_value);
-- the message names the job by its place in the batch.
--
-- p_workflow, when not NULL, is the workflow the jobs are the steps of
-- (see create_workflow, its only caller): they are inserted in it. It must
-- be a workflow the session's login made in this transaction, with no job
-- yet, and the jobs have no unique key.
--
-- It runs as its owner (SECURITY DEFINER), so that a producer role enqueues
-- without any privilege on the tables (see functions/roles.sql): the rows
-- it inserts pass this function's checks and keep the groups' invariants,
-- whoever calls it. So its search_path is pinned (pg_temp last, where
-- nothing is looked up), every pgtask object it uses is named with its
-- schema, and it runs no dynamic SQL. Each job's enqueued_by is the
-- session's login (the column's default, session_user), which the caller
-- cannot choose.
DROP FUNCTION IF EXISTS pgtask.enqueue_jobs(
    jsonb[], integer[], integer[], text[], text[], smallint[], integer[], integer[], boolean[], text[], bigint[],
    text[], text[], text[], bigint[], text[], jsonb[], integer[], text[], text[], integer[], text[],
    integer[], text[], text[], integer[], bigint[], integer[], integer[], text[], text[]);
CREATE OR REPLACE FUNCTION pgtask.enqueue_jobs(
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
    p_workflow bigint DEFAULT NULL
) RETURNS TABLE (job_ids bigint[], job_existed boolean[])
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgtask, pg_temp
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
    -- The ids of the group rows this call inserted, and their heads.
    made bigint[] := '{}';
    made_heads bigint[] := '{}';
    missing bigint[];
    bad integer;
    used integer;
    -- A job over a size limit: its place in the batch, and what is wrong.
    bad_at bigint;
    bad_size integer;
    bad_what text;
    bad_code text;
    -- Unique jobs: each job's full key (NULL for none), the job already
    -- holding it, the first job of the batch with it, and which to insert.
    keys text[];
    holders bigint[];
    firsts_of integer[];
    keep boolean[];
    kept integer[];
    used_groups integer[];
    inserted bigint[];
    woken text;
    woken_queue text;
    -- Concurrency limits: the keys' row ids, the slots this call may take
    -- (0 where it could not lock the row), whether it locked it, and which
    -- jobs it admits.
    nl integer := coalesce(cardinality(p_limit_keys), 0);
    lids bigint[];
    lfree integer[];
    llocked boolean[];
    admit boolean[];
    lk record;
    lrow record;
    lmax integer;
    -- Strategies: each listed limit's, whether its key had a job waiting,
    -- and the jobs inserted cancelled.
    strat text[];
    had_waiting boolean[];
    dropped boolean[];
    debounced bigint[];
    -- Rate limits: the keys' row ids, whether this call locked each.
    nr integer := coalesce(cardinality(p_rate_keys), 0);
    rids bigint[];
    rlocked boolean[];
    rk record;
    rrow pgtask.rate_keys;
    rf record;
    now_ts timestamptz;
    -- Fair queues: each job's tenant and turn (see functions/fair.sql).
    turns record;
BEGIN
    IF n = 0 THEN
        RETURN QUERY SELECT '{}'::bigint[], '{}'::boolean[];
        RETURN;
    END IF;
    IF p_workflow IS NOT NULL AND (
           EXISTS (SELECT 1 FROM unnest(p_unique_keys) k WHERE k <> '')
           OR NOT EXISTS (SELECT 1 FROM pgtask.workflows w
                           WHERE w.id = p_workflow AND w.enqueued_by = session_user AND w.created_at = now())
           OR EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.workflow_id = p_workflow)) THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: a workflow''s steps go into a workflow this transaction made, with no step yet, and have no unique key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(p_settings) IS DISTINCT FROM n OR cardinality(p_groups) IS DISTINCT FROM n
       OR coalesce(cardinality(p_queues), 0) <> ns OR coalesce(cardinality(p_priorities), 0) <> ns
       OR coalesce(cardinality(p_aging_ms), 0) <> ns
       OR coalesce(cardinality(p_max_attempts), 0) <> ns OR coalesce(cardinality(p_fail_blocks_group), 0) <> ns
       OR coalesce(cardinality(p_run_at), 0) <> ns OR coalesce(cardinality(p_delay_us), 0) <> ns
       OR coalesce(cardinality(p_group_queues), 0) <> ng
       OR (p_metadata IS NOT NULL AND cardinality(p_metadata) <> n) THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: the argument arrays differ in length';
    END IF;
    IF NOT (pgtask.is_list(p_kinds) AND pgtask.is_list(p_queues) AND pgtask.is_list(p_priorities) AND pgtask.is_list(p_aging_ms)
            AND pgtask.is_list(p_max_attempts) AND pgtask.is_list(p_fail_blocks_group)
            AND pgtask.is_list(p_run_at) AND pgtask.is_list(p_delay_us)
            AND pgtask.is_list(p_group_queues) AND pgtask.is_list(p_group_keys)) THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: settings and groups must be one-dimensional arrays indexed from 1';
    END IF;
    IF array_position(p_run_at, NULL) IS NOT NULL OR array_position(p_delay_us, NULL) IS NOT NULL
       OR array_position(p_aging_ms, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: run_at, delay_us and aging_ms must not be NULL';
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
    IF p_limits IS NOT NULL THEN
        IF cardinality(p_limits) <> n OR coalesce(cardinality(p_limit_queues), 0) <> nl
           OR coalesce(cardinality(p_limit_max), 0) <> nl
           OR NOT (pgtask.is_list(p_limit_queues) AND pgtask.is_list(p_limit_keys) AND pgtask.is_list(p_limit_max)) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: the limit arrays differ in length';
        END IF;
        SELECT count(*) FILTER (WHERE u.l IS NULL OR u.l < 0 OR u.l > nl
                                   OR (u.l > 0 AND (u.g > 0 OR p_queues[u.o] IS DISTINCT FROM p_limit_queues[u.l]
                                                    OR p_limit_keys[u.l] IS NULL
                                                    OR p_limit_max[u.l] IS NULL OR p_limit_max[u.l] < 1)))
          INTO bad
          FROM (SELECT unnest(p_limits) AS l, unnest(p_groups) AS g, unnest(p_settings) AS o) u;
        IF bad > 0 THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: % job(s) name no listed limit of their queue, are grouped and limited, or have a limit below 1', bad;
        END IF;
    ELSIF nl > 0 THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: limits listed without jobs naming them';
    END IF;
    IF p_rates IS NOT NULL THEN
        IF cardinality(p_rates) <> n OR coalesce(cardinality(p_rate_queues), 0) <> nr
           OR coalesce(cardinality(p_rate_n), 0) <> nr OR coalesce(cardinality(p_rate_period_us), 0) <> nr
           OR coalesce(cardinality(p_rate_burst), 0) <> nr
           OR NOT (pgtask.is_list(p_rate_queues) AND pgtask.is_list(p_rate_keys) AND pgtask.is_list(p_rate_n)
                   AND pgtask.is_list(p_rate_period_us) AND pgtask.is_list(p_rate_burst)) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: the rate arrays differ in length';
        END IF;
        SELECT count(*) FILTER (WHERE u.r IS NULL OR u.r < 0 OR u.r > nr
                                   OR (u.r > 0 AND (u.g > 0 OR coalesce(u.l, 0) > 0
                                                    OR p_queues[u.o] IS DISTINCT FROM p_rate_queues[u.r]
                                                    OR p_rate_keys[u.r] IS NULL
                                                    OR p_rate_n[u.r] IS NULL OR p_rate_n[u.r] < 1
                                                    OR p_rate_period_us[u.r] IS NULL OR p_rate_period_us[u.r] < 1000
                                                    OR p_rate_burst[u.r] IS NULL OR p_rate_burst[u.r] < 1)))
          INTO bad
          FROM (SELECT unnest(p_rates) AS r, unnest(p_groups) AS g, unnest(p_settings) AS o, unnest(p_limits) AS l) u;
        IF bad > 0 THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: % job(s) name no listed rate of their queue, are grouped or limited and rate-limited, or have a rate below 1 per 1ms or a burst below 1', bad
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF nr > 0 THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: rates listed without jobs naming them';
    END IF;
    IF p_limit_strategies IS NOT NULL THEN
        IF cardinality(p_limit_strategies) <> nl OR NOT pgtask.is_list(p_limit_strategies) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: the limit arrays differ in length';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(p_limit_strategies) st
                    WHERE st IS NULL OR st NOT IN ('queue', 'cancel_newest', 'keep_oldest', 'keep_newest')) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: a limit strategy is not one of queue, cancel_newest, keep_oldest, keep_newest'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(p_limit_strategies) st WHERE st <> 'queue') THEN
            strat := p_limit_strategies;
        END IF;
    END IF;
    -- The limits of the Go side (runtime.MaxPayloadBytes, MaxMetadataBytes),
    -- for callers that come here past its checks. A payload is measured as
    -- jsonb prints it. Printing costs a twentieth of an enqueue, so a payload
    -- of at most 512 bytes stored is let through unprinted: none prints to
    -- more than 8 MiB. (What prints longest per byte stored is a number
    -- such as 1e131071: 16 bytes stored, 131,072 digits printed; the 31 that
    -- 512 bytes hold print to 4 MB.) Metadata is an object of strings whose
    -- keys and values come to at most 16 KiB.
    SELECT u.i, octet_length(u.p::text) INTO bad_at, bad_size
      FROM unnest(p_payloads) WITH ORDINALITY AS u(p, i)
     WHERE CASE WHEN pg_column_size(u.p) <= 512 THEN false ELSE octet_length(u.p::text) > 8388608 END
     ORDER BY u.i
     LIMIT 1;
    IF bad_at IS NOT NULL THEN
        RAISE EXCEPTION 'pgtask.enqueue_jobs: job %: payload is % bytes, more than the 8388608 allowed', bad_at, bad_size
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF p_metadata IS NOT NULL THEN
        SELECT u.i,
               CASE WHEN jsonb_typeof(u.m) <> 'object' THEN 'is not a JSON object'
                    WHEN s.not_string IS NOT NULL THEN 'value of ' || to_json(s.not_string)::text || ' is not a string'
                    ELSE 'is ' || s.size || ' bytes, more than the 16384 allowed' END,
               CASE WHEN jsonb_typeof(u.m) <> 'object' OR s.not_string IS NOT NULL THEN '22023' ELSE '54000' END
          INTO bad_at, bad_what, bad_code
          FROM unnest(p_metadata) WITH ORDINALITY AS u(m, i)
          CROSS JOIN LATERAL (
              SELECT min(e.key) FILTER (WHERE jsonb_typeof(e.value) <> 'string') AS not_string,
                     sum(octet_length(e.key) + octet_length(e.value #>> '{}')) AS size
                FROM jsonb_each(CASE WHEN jsonb_typeof(u.m) = 'object' THEN u.m END) AS e) s
         WHERE u.m IS NOT NULL AND (jsonb_typeof(u.m) <> 'object' OR s.not_string IS NOT NULL OR s.size > 16384)
         ORDER BY u.i
         LIMIT 1;
        IF bad_at IS NOT NULL THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: job %: metadata %', bad_at, bad_what USING ERRCODE = bad_code;
        END IF;
    END IF;
    IF p_unique_keys IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_unique_keys) k WHERE k <> '') THEN
        IF cardinality(p_unique_keys) <> n OR coalesce(cardinality(p_unique_windows_us), 0) <> ns
           OR coalesce(cardinality(p_unique_statuses), 0) <> ns THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: the unique arrays differ in length';
        END IF;
        -- The full key: the kind, length-prefixed, the window if any (its
        -- length and number), then the caller's key; no two differ in one
        -- part and agree in the whole.
        SELECT array_agg(CASE WHEN u.k IS NULL OR u.k = '' THEN NULL
                              ELSE length(p_kinds[u.o]) || ':' || p_kinds[u.o] || ':'
                                   || CASE WHEN p_unique_windows_us[u.o] > 0
                                           THEN p_unique_windows_us[u.o] || '@'
                                                || floor(extract(epoch FROM now()) * 1e6 / p_unique_windows_us[u.o])::bigint
                                           ELSE '' END
                                   || ':' || u.k END ORDER BY u.i)
          INTO keys
          FROM unnest(p_unique_keys, p_settings) WITH ORDINALITY AS u(k, o, i);
        -- Keys a committed job holds need no lock. The others are locked, in
        -- order, then looked for again: a job committed meanwhile by an
        -- enqueue that held the lock is found now.
        SELECT array_agg(h.id ORDER BY u.i) INTO holders
          FROM unnest(keys) WITH ORDINALITY AS u(k, i)
          LEFT JOIN pgtask.jobs h ON h.unique_key = u.k AND h.status = ANY (h.unique_statuses);
        IF (SELECT count(DISTINCT u.k) FROM unnest(keys, holders) AS u(k, h) WHERE u.k IS NOT NULL AND u.h IS NULL) > 1000 THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: more than 1000 new unique keys in one batch; split it'
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        PERFORM pg_advisory_xact_lock(pgtask.unique_lock_class(), hashtext(d.k))
           FROM (SELECT DISTINCT u.k FROM unnest(keys, holders) AS u(k, h)
                  WHERE u.k IS NOT NULL AND u.h IS NULL ORDER BY u.k) d;
        SELECT array_agg(coalesce(u.h, h.id) ORDER BY u.i) INTO holders
          FROM unnest(keys, holders) WITH ORDINALITY AS u(k, h, i)
          LEFT JOIN pgtask.jobs h ON u.h IS NULL AND h.unique_key = u.k AND h.status = ANY (h.unique_statuses);
        SELECT array_agg(f.first_i ORDER BY f.i), array_agg(f.h IS NULL AND f.first_i = f.i ORDER BY f.i)
          INTO firsts_of, keep
          FROM (SELECT u.i, u.h, CASE WHEN u.k IS NULL THEN u.i ELSE min(u.i) OVER (PARTITION BY u.k) END::integer AS first_i
                  FROM unnest(keys, holders) WITH ORDINALITY AS u(k, h, i)) f;
        IF false = ANY (keep) THEN
            -- Insert the others, then answer for every job.
            -- Arrays are read by zipping them (unnest), never by subscript,
            -- which walks an array of text or with NULLs from its start.
            SELECT array_agg(u.i ORDER BY u.i), array_agg(DISTINCT u.g) FILTER (WHERE u.g > 0)
              INTO kept, used_groups
              FROM unnest(keep, p_groups) WITH ORDINALITY AS u(kp, g, i) WHERE u.kp;
            IF kept IS NULL THEN
                inserted := '{}';
            ELSE
                SELECT e.job_ids INTO inserted FROM pgtask.enqueue_jobs(
                    ARRAY(SELECT u.p FROM unnest(p_payloads, keep) WITH ORDINALITY AS u(p, kp, i) WHERE u.kp ORDER BY u.i),
                    ARRAY(SELECT u.o FROM unnest(p_settings, keep) WITH ORDINALITY AS u(o, kp, i) WHERE u.kp ORDER BY u.i),
                    ARRAY(SELECT coalesce(array_position(used_groups, u.g), 0)
                            FROM unnest(p_groups, keep) WITH ORDINALITY AS u(g, kp, i) WHERE u.kp ORDER BY u.i),
                    p_kinds, p_queues, p_priorities, p_aging_ms, p_max_attempts, p_fail_blocks_group, p_run_at, p_delay_us,
                    coalesce(ARRAY(SELECT w.q FROM unnest(p_group_queues) WITH ORDINALITY AS w(q, g)
                                    WHERE w.g = ANY (used_groups) ORDER BY w.g), '{}'),
                    coalesce(ARRAY(SELECT w.k FROM unnest(p_group_keys) WITH ORDINALITY AS w(k, g)
                                    WHERE w.g = ANY (used_groups) ORDER BY w.g), '{}'),
                    ARRAY(SELECT u.k FROM unnest(p_unique_keys, keep) WITH ORDINALITY AS u(k, kp, i) WHERE u.kp ORDER BY u.i),
                    p_unique_windows_us, p_unique_statuses,
                    ARRAY(SELECT u.m FROM unnest(p_metadata, keep) WITH ORDINALITY AS u(m, kp, i) WHERE u.kp ORDER BY u.i),
                    CASE WHEN p_limits IS NOT NULL THEN
                        ARRAY(SELECT u.l FROM unnest(p_limits, keep) WITH ORDINALITY AS u(l, kp, i) WHERE u.kp ORDER BY u.i) END,
                    p_limit_queues, p_limit_keys, p_limit_max, p_limit_strategies,
                    CASE WHEN p_rates IS NOT NULL THEN
                        ARRAY(SELECT u.r FROM unnest(p_rates, keep) WITH ORDINALITY AS u(r, kp, i) WHERE u.kp ORDER BY u.i) END,
                    p_rate_queues, p_rate_keys, p_rate_n, p_rate_period_us, p_rate_burst,
                    CASE WHEN p_fair IS NOT NULL THEN
                        ARRAY(SELECT u.f FROM unnest(p_fair, keep) WITH ORDINALITY AS u(f, kp, i) WHERE u.kp ORDER BY u.i) END,
                    p_fair_queues, p_fair_tenants) e;
            END IF;
            RETURN QUERY
                SELECT array_agg(coalesce(r.h, inserted[r.pos]) ORDER BY r.i), array_agg(NOT keep[r.i] ORDER BY r.i)
                  FROM (SELECT u.i, u.h, k.o AS pos
                          FROM unnest(holders, firsts_of) WITH ORDINALITY AS u(h, f, i)
                          LEFT JOIN unnest(kept) WITH ORDINALITY AS k(j, o) ON k.j = u.f) r;
            RETURN;
        END IF;
    END IF;

    -- The same expression decides each job's status and whether to wake workers.
    SELECT array_agg(CASE WHEN s.run_at <> '' THEN s.run_at::timestamptz
                          WHEN s.delay_us <> 0 THEN now() + s.delay_us * interval '1 microsecond'
                          ELSE now() END ORDER BY s.ord)
      INTO starts
      FROM unnest(p_run_at, p_delay_us) WITH ORDINALITY AS s(run_at, delay_us, ord);

    IF ng > 0 THEN
        gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
    END IF;
    -- The ids are taken once the existing groups are locked: no advance of
    -- those groups can run until this transaction ends, so none has seen a
    -- job of theirs with a higher id than these (see pending_from in
    -- 0001_baseline.sql), and their ids follow the order the locks were taken.
    -- A group missing now that another transaction creates meanwhile is
    -- joined below with ids taken before its row was locked; see there.
    SELECT array_agg(nextval('pgtask.jobs_id_seq'::regclass)) INTO ids FROM generate_series(1, n);

    IF ng > 0 THEN
        IF array_position(gids, NULL) IS NOT NULL THEN
            created := true;
            SELECT array_agg(f.first_id ORDER BY f.g) INTO firsts
              FROM (SELECT u.g, min(u.id) AS first_id
                      FROM (SELECT unnest(p_groups) AS g, unnest(ids) AS id) u
                     WHERE u.g > 0 GROUP BY u.g) f;
            missing := gids;
            LOOP
                BEGIN
                    -- Missing groups, each with its first job as head; a
                    -- group listed twice gets the earlier of its first jobs.
                    WITH ins AS (
                        INSERT INTO pgtask.queue_groups (queue, group_key)
                        SELECT w.q, w.k
                          FROM unnest(p_group_queues, p_group_keys, firsts, gids) AS w(q, k, first_id, gid)
                         WHERE w.gid IS NULL
                         ORDER BY w.q COLLATE "C", w.k COLLATE "C", w.first_id
                        ON CONFLICT (queue, group_key) DO NOTHING
                        RETURNING id, queue, group_key
                    )
                    SELECT coalesce(array_agg(ins.id), '{}'),
                           coalesce(array_agg((SELECT min(w.first_id)
                                                 FROM unnest(p_group_queues, p_group_keys, firsts) AS w(q, k, first_id)
                                                WHERE w.q = ins.queue AND w.k = ins.group_key)), '{}')
                      INTO made, made_heads
                      FROM ins;
                    gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
                    EXIT WHEN array_position(gids, NULL) IS NULL;
                    RAISE EXCEPTION USING ERRCODE = 'PGT01';
                EXCEPTION WHEN SQLSTATE 'PGT01' THEN
                    -- Undone; see what is there now and try again.
                    made := '{}';
                    made_heads := '{}';
                    gids := pgtask.share_lock_groups(p_group_queues, p_group_keys);
                END;
            END LOOP;
            -- A group that was missing when the ids were taken, and that
            -- another transaction created and committed before this one could
            -- insert it, may have moved on past them meanwhile: its next job
            -- is then looked for from this call's first job of it on (see
            -- pending_from in 0001_baseline.sql). The update conflicts with no
            -- enqueue's share lock, and no advance holds the row while this
            -- transaction shares it.
            UPDATE pgtask.queue_groups g SET pending_from = w.first_id
              FROM unnest(p_group_queues, p_group_keys, firsts, missing) AS w(q, k, first_id, gid)
             WHERE w.gid IS NULL AND g.queue = w.q AND g.group_key = w.k AND g.id <> ALL (made)
               AND (g.pending_from IS NULL OR g.pending_from > w.first_id);
        END IF;
    END IF;

    IF nl > 0 THEN
        lids := array_fill(NULL::bigint, ARRAY[nl]);
        lfree := array_fill(0, ARRAY[nl]);
        llocked := array_fill(false, ARRAY[nl]);
        FOR lk IN
            SELECT w.q, w.k, w.m, w.ord FROM unnest(p_limit_queues, p_limit_keys, p_limit_max) WITH ORDINALITY AS w(q, k, m, ord)
             ORDER BY w.q COLLATE "C", w.k COLLATE "C"
        LOOP
            LOOP
                IF coalesce(strat[lk.ord], 'queue') <> 'queue' THEN
                    -- A strategy decides on what the key holds: wait for it.
                    SELECT id, free, declared INTO lrow FROM pgtask.limit_keys
                     WHERE queue = lk.q AND limit_key = lk.k
                       FOR NO KEY UPDATE;
                ELSE
                    SELECT id, free, declared INTO lrow FROM pgtask.limit_keys
                     WHERE queue = lk.q AND limit_key = lk.k
                       FOR NO KEY UPDATE SKIP LOCKED;
                END IF;
                IF FOUND THEN
                    llocked[lk.ord] := true;
                    EXIT;
                END IF;
                -- Locked by someone else, or missing. A key's row, once
                -- there, stays: its id needs no lock.
                SELECT id, free, declared INTO lrow FROM pgtask.limit_keys
                 WHERE queue = lk.q AND limit_key = lk.k;
                EXIT WHEN FOUND;
                lmax := pgtask.limit_in_force(lk.q, lk.k, lk.m);
                INSERT INTO pgtask.limit_keys (queue, limit_key, declared, max_running, free)
                VALUES (lk.q, lk.k, lk.m, lmax, lmax)
                ON CONFLICT (queue, limit_key) DO NOTHING
                RETURNING id, free, declared INTO lrow;
                IF FOUND THEN
                    llocked[lk.ord] := true;
                    -- An operator's limit for every key of the queue, set
                    -- while this is in flight, was not seen here, and its
                    -- set_limit cannot see this row: maintenance looks at
                    -- the limit in force again once this commits.
                    INSERT INTO pgtask.limit_checks (key_id, declared) VALUES (lrow.id, lk.m);
                    EXIT;
                END IF;
            END LOOP;
            lids[lk.ord] := lrow.id;
            IF llocked[lk.ord] THEN
                lfree[lk.ord] := greatest(lrow.free, 0);
            END IF;
            IF lrow.declared <> lk.m THEN
                -- The tasks declare another limit now: maintenance applies
                -- it under the key's lock.
                INSERT INTO pgtask.limit_checks (key_id, declared) VALUES (lrow.id, lk.m);
            END IF;
        END LOOP;
        -- The jobs due now take the free slots of the keys this call holds,
        -- by priority, then place in the batch.
        SELECT array_agg(u.l > 0 AND u.due AND u.rn <= lfree[u.l] ORDER BY u.i) INTO admit
          FROM (SELECT x.l, x.i, starts[x.o] <= now() AS due,
                       row_number() OVER (PARTITION BY x.l, starts[x.o] <= now() ORDER BY p_priorities[x.o], x.i) AS rn
                  FROM unnest(p_limits, p_settings) WITH ORDINALITY AS x(l, o, i)) u;
        -- A key this call holds that it leaves jobs waiting on is marked
        -- waiting, its frontier moved back before a job of a better
        -- priority (see pick_admitted).
        UPDATE pgtask.limit_keys k
           SET free = k.free - a.taken, waiting = k.waiting OR a.waits,
               frontier_priority = CASE WHEN a.best < k.frontier_priority THEN NULL ELSE k.frontier_priority END,
               frontier_id = CASE WHEN a.best < k.frontier_priority THEN NULL ELSE k.frontier_id END
          FROM (SELECT lids[u.l] AS id, count(*) FILTER (WHERE u.a) AS taken,
                       coalesce(bool_or(NOT u.a AND starts[u.o] <= now()), false) AS waits,
                       min(p_priorities[u.o]) FILTER (WHERE NOT u.a AND starts[u.o] <= now()) AS best
                  FROM unnest(p_limits, admit, p_settings) AS u(l, a, o)
                 WHERE u.l > 0 AND llocked[u.l] GROUP BY u.l) a
         WHERE k.id = a.id AND (a.taken > 0 OR (a.waits AND NOT k.waiting) OR a.best < k.frontier_priority);
        IF strat IS NOT NULL THEN
            SELECT array_agg(st <> 'queue' AND EXISTS (
                       SELECT 1 FROM pgtask.jobs w
                        WHERE w.limit_id = lids[u.ord] AND w.status = 'queued' AND NOT w.is_head) ORDER BY u.ord)
              INTO had_waiting
              FROM unnest(strat) WITH ORDINALITY AS u(st, ord);
            -- Of each key's jobs due now that took no slot, in batch order:
            -- which the key's strategy cancels.
            SELECT array_agg(coalesce(CASE WHEN u.l > 0 AND u.due AND NOT u.a THEN
                                 CASE strat[u.l]
                                      WHEN 'cancel_newest' THEN true
                                      WHEN 'keep_oldest' THEN u.nth > 1 OR had_waiting[u.l]
                                      WHEN 'keep_newest' THEN u.nth_last > 1
                                      ELSE false END
                             END, false) ORDER BY u.i)
              INTO dropped
              FROM (SELECT x.l, x.i, x.a, starts[x.o] <= now() AS due,
                           row_number() OVER (PARTITION BY x.l, starts[x.o] <= now() AND NOT x.a ORDER BY x.i) AS nth,
                           row_number() OVER (PARTITION BY x.l, starts[x.o] <= now() AND NOT x.a ORDER BY x.i DESC) AS nth_last
                      FROM unnest(p_limits, p_settings, admit) WITH ORDINALITY AS x(l, o, a, i)) u;
            -- keep_newest: the jobs the key had waiting make way for the
            -- batch's last. One a finisher is admitting now is skipped: it runs.
            WITH olds AS (
                SELECT w.id FROM pgtask.jobs w
                 WHERE w.limit_id IN (SELECT DISTINCT lids[u.l]
                                        FROM unnest(p_limits, p_settings, admit) AS u(l, o, a)
                                       WHERE u.l > 0 AND strat[u.l] = 'keep_newest' AND NOT u.a AND starts[u.o] <= now())
                   AND w.status = 'queued' AND NOT w.is_head
                   FOR UPDATE SKIP LOCKED
            ), gone AS (
                UPDATE pgtask.jobs j
                   SET status = 'cancelled', finished_at = clock_timestamp(),
                       errors = pgtask.append_error(j.errors, jsonb_build_array(jsonb_build_object(
                           'attempt', j.attempts, 'at', clock_timestamp(),
                           'error', 'cancelled: a newer job of its limit key was enqueued (keep_newest)')))
                  FROM olds WHERE j.id = olds.id
                RETURNING j.id
            )
            SELECT coalesce(array_agg(id), '{}') INTO debounced FROM gone;
            PERFORM pg_notify('pgtask_finished', d::text) FROM unnest(debounced) d;
        END IF;
        -- Jobs due now that wait on a key this call could not lock: the key
        -- is looked at again once this commits.
        INSERT INTO pgtask.limit_checks (key_id)
        SELECT DISTINCT lids[u.l]
          FROM unnest(p_limits, p_settings) AS u(l, o)
         WHERE u.l > 0 AND NOT llocked[u.l] AND starts[u.o] <= now();
    END IF;

    IF nr > 0 THEN
        rids := array_fill(NULL::bigint, ARRAY[nr]);
        rlocked := array_fill(false, ARRAY[nr]);
        FOR rk IN
            SELECT w.q, w.k, w.n, w.p, w.b, w.ord
              FROM unnest(p_rate_queues, p_rate_keys, p_rate_n, p_rate_period_us, p_rate_burst) WITH ORDINALITY AS w(q, k, n, p, b, ord)
             ORDER BY w.q COLLATE "C", w.k COLLATE "C"
        LOOP
            LOOP
                SELECT * INTO rrow FROM pgtask.rate_keys
                 WHERE queue = rk.q AND rate_key = rk.k
                   FOR NO KEY UPDATE SKIP LOCKED;
                IF FOUND THEN
                    rlocked[rk.ord] := true;
                    EXIT;
                END IF;
                -- Locked by someone else, or missing. A key's row, once
                -- there, stays: its id needs no lock.
                SELECT * INTO rrow FROM pgtask.rate_keys WHERE queue = rk.q AND rate_key = rk.k;
                EXIT WHEN FOUND;
                rf := pgtask.rate_in_force(rk.q, rk.k, rk.n, rk.p, rk.b);
                INSERT INTO pgtask.rate_keys (queue, rate_key, declared_rate, declared_period_us, declared_burst,
                                              rate, period_us, burst, tokens, refilled_at)
                VALUES (rk.q, rk.k, rk.n, rk.p, rk.b, rf.rate, rf.period_us, rf.burst, rf.burst, clock_timestamp())
                ON CONFLICT (queue, rate_key) DO NOTHING
                RETURNING * INTO rrow;
                IF FOUND THEN
                    rlocked[rk.ord] := true;
                    EXIT;
                END IF;
            END LOOP;
            rids[rk.ord] := rrow.id;
            IF rlocked[rk.ord] AND (rrow.declared_rate, rrow.declared_period_us, rrow.declared_burst) <> (rk.n, rk.p, rk.b) THEN
                -- The tasks declare another rate now: it applies from here
                -- on, to the tokens the key has now.
                now_ts := clock_timestamp();
                rf := pgtask.rate_in_force(rk.q, rk.k, rk.n, rk.p, rk.b);
                UPDATE pgtask.rate_keys
                   SET declared_rate = rk.n, declared_period_us = rk.p, declared_burst = rk.b,
                       rate = rf.rate, period_us = rf.period_us, burst = rf.burst,
                       tokens = least(pgtask.rate_tokens(rrow, now_ts), rf.burst), refilled_at = now_ts,
                       ready_at = CASE WHEN ready_at IS NOT NULL THEN now_ts END
                 WHERE id = rrow.id;
            END IF;
        END LOOP;
    END IF;
    -- Tenants and turns of the jobs of fair queues (see functions/fair.sql).
    SELECT f.tenants, f.seqs INTO turns
      FROM pgtask.fair_turns(p_settings, p_queues, p_fair, p_fair_queues, p_fair_tenants) f;

    -- A grouped job is its group's head only if this call created the group
    -- with it; the probe runs only then. (A subscript of 0 is NULL.) A
    -- limited job is admitted (is_head) if it took a slot above; a rate-
    -- limited one is never a head.
    INSERT INTO pgtask.jobs (
        id, queue, kind, group_key, group_id, is_head, status, priority, aging_ms, age_due, payload,
        max_attempts, fail_blocks_group, run_after, unique_key, unique_statuses, unique_until, metadata, limit_id,
        rate_id, finished_at, errors, tenant, fair_seq, workflow_id
    )
    SELECT t.id, t.q, p_kinds[t.o], p_group_keys[t.g], gids[t.g],
           CASE WHEN t.l > 0 THEN admit[t.i] WHEN t.r > 0 THEN false
                ELSE t.g = 0 OR (created AND t.id = ANY (made_heads)) END,
           CASE WHEN dropped[t.i] THEN 'cancelled'::pgtask.job_status
                WHEN t.run_after > now() THEN 'scheduled'::pgtask.job_status
                ELSE 'queued'::pgtask.job_status END,
           p_priorities[t.o], p_aging_ms[t.o],
           CASE WHEN p_aging_ms[t.o] > 0 AND p_priorities[t.o] > 0
                THEN t.run_after + p_aging_ms[t.o] * interval '1 millisecond' END,
           t.payload, p_max_attempts[t.o], p_fail_blocks_group[t.o], t.run_after,
           keys[t.i], CASE WHEN keys[t.i] IS NOT NULL THEN string_to_array(p_unique_statuses[t.o], ',')::pgtask.job_status[] END,
           CASE WHEN keys[t.i] IS NOT NULL AND p_unique_windows_us[t.o] > 0
                THEN to_timestamp((floor(extract(epoch FROM now()) * 1e6 / p_unique_windows_us[t.o]) + 1)
                                  * p_unique_windows_us[t.o] / 1e6) END,
           t.meta, lids[t.l], rids[t.r],
           CASE WHEN dropped[t.i] THEN now() END,
           CASE WHEN dropped[t.i]
                THEN jsonb_build_array(jsonb_build_object('attempt', 0, 'at', now(), 'error',
                         format('cancelled at enqueue: its limit key was at its limit (%s)', strat[t.l])))
                ELSE '[]'::jsonb END,
           turns.tenants[t.i], turns.seqs[t.i], p_workflow
      FROM (SELECT u.id, u.i, u.o, u.g, coalesce(u.l, 0) AS l, coalesce(u.r, 0) AS r, u.payload, u.meta,
                   p_queues[u.o] AS q, starts[u.o] AS run_after
              -- unnest in the select list zips the arrays without
              -- materialising them as a table function would.
              FROM (SELECT unnest(ids) AS id, generate_series(1, n) AS i, unnest(p_settings) AS o, unnest(p_groups) AS g,
                           unnest(p_payloads) AS payload, unnest(p_metadata) AS meta, unnest(p_limits) AS l,
                           unnest(p_rates) AS r) u) t;

    IF nr > 0 THEN
        -- The keys of jobs due now are ready: at once (this call holds the
        -- row until it commits), or by maintenance's next round.
        now_ts := clock_timestamp();
        FOR rk IN
            SELECT DISTINCT u.r FROM unnest(p_rates, p_settings) AS u(r, o)
             WHERE u.r > 0 AND starts[u.o] <= now() ORDER BY u.r
        LOOP
            IF rlocked[rk.r] THEN
                -- A job before the key's frontier moves it back (see
                -- pick_rated): its ids were taken before this call held
                -- the row.
                UPDATE pgtask.rate_keys k
                   SET frontier_priority = NULL, frontier_id = NULL
                 WHERE k.id = rids[rk.r] AND k.frontier_id IS NOT NULL
                   AND EXISTS (SELECT 1 FROM unnest(p_rates, p_settings, ids) AS u(r, o, id)
                                WHERE u.r = rk.r AND starts[u.o] <= now()
                                  AND (p_priorities[u.o], u.id) <= (k.frontier_priority, k.frontier_id));
                UPDATE pgtask.rate_keys k
                   SET ready_at = pgtask.rate_token_at(pgtask.rate_tokens(k, now_ts), now_ts, k.rate, k.period_us)
                 WHERE k.id = rids[rk.r] AND k.ready_at IS NULL
                RETURNING k.queue INTO woken_queue;
                IF FOUND THEN
                    PERFORM pg_notify('pgtask', woken_queue);
                END IF;
            ELSE
                INSERT INTO pgtask.rate_checks (key_id) VALUES (rids[rk.r]);
            END IF;
        END LOOP;
    END IF;

    -- Wake workers of queues that got a runnable head: an ungrouped job, or
    -- a new group's first job, due now, when a runner may be idle (see
    -- above). A spare wake-up costs one empty claim. The idle lock is
    -- tested by taking it exclusively for an instant, at session level, so
    -- that enqueues never wait for each other on it; one that finds
    -- another's instant mistakes it for an idle runner and notifies. It is
    -- taken and let go in one expression, which no cancel interrupts: a
    -- session left holding it would find it free ever after.
    -- The notification's payload is the queue's first new job's id, a
    -- colon and the queue: a worker whose claims' cursor is past that id
    -- looks back as far as it (see pgtask.pick_heads), since the job
    -- committed after a later one was claimed.
    FOR woken IN
        SELECT min(u.id)::text || ':' || p_queues[u.o]
          FROM (SELECT unnest(ids) AS id, unnest(p_settings) AS o, unnest(p_groups) AS g,
                       unnest(p_limits) AS l, unnest(admit) AS a, unnest(p_rates) AS r) u
         WHERE CASE WHEN u.l > 0 THEN u.a WHEN u.r > 0 THEN false ELSE u.g = 0 OR created END AND starts[u.o] <= now()
         GROUP BY p_queues[u.o]
    LOOP
        woken_queue := substr(woken, length(split_part(woken, ':', 1)) + 2);
        PERFORM pg_advisory_xact_lock_shared(pgtask.enqueue_lock_class(), hashtext(woken_queue));
        IF NOT (pg_try_advisory_lock(pgtask.idle_lock_class(), hashtext(woken_queue))
                AND pg_advisory_unlock(pgtask.idle_lock_class(), hashtext(woken_queue))) THEN
            PERFORM pg_notify('pgtask', woken);
        END IF;
    END LOOP;
    RETURN QUERY SELECT ids, array_fill(false, ARRAY[n]);
END;
$$;

-- Inserts one plain job and returns its id: enqueue_jobs for a single job
-- that has no group, unique key, metadata, concurrency limit, rate or
-- tenant, the case of an Enqueue per transaction, without the lookups and
-- checks of the features it does not use. The job's settings are
-- enqueue_jobs' (p_run_at '' for "now plus p_delay_us"), and what it
-- inserts, checks and notifies is what enqueue_jobs does for such a job. A
-- job of a queue that is fair (see functions/fair.sql) needs a tenant and
-- a turn: it goes to enqueue_jobs, which gives them. Both read
-- pgtask.fair_queues without waiting, so while a transaction not yet
-- committed makes a queue fair, or stops it being fair, the job is placed
-- as the queue was before: as enqueue_jobs would place it.
--
-- It runs as its owner (SECURITY DEFINER) for producers, with the same
-- pinned search_path as enqueue_jobs.
CREATE OR REPLACE FUNCTION pgtask.enqueue_job(
    p_payload jsonb, p_kind text, p_queue text, p_priority smallint, p_aging_ms integer, p_max_attempts integer,
    p_fail_blocks_group boolean, p_run_at text, p_delay_us bigint
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgtask, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    new_id bigint;
    run_after timestamptz;
BEGIN
    IF p_run_at IS NULL OR p_delay_us IS NULL OR p_aging_ms IS NULL THEN
        RAISE EXCEPTION 'pgtask.enqueue_job: run_at, delay_us and aging_ms must not be NULL';
    END IF;
    -- enqueue_jobs' limit on a payload's size, measured the same way.
    IF pg_column_size(p_payload) > 512 AND octet_length(p_payload::text) > 8388608 THEN
        RAISE EXCEPTION 'pgtask.enqueue_job: payload is % bytes, more than the 8388608 allowed',
            octet_length(p_payload::text)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        SELECT e.job_ids[1] INTO new_id
          FROM pgtask.enqueue_jobs(
              ARRAY[p_payload], '{1}', '{0}', ARRAY[p_kind], ARRAY[p_queue], ARRAY[p_priority], ARRAY[p_aging_ms],
              ARRAY[p_max_attempts], ARRAY[p_fail_blocks_group], ARRAY[p_run_at], ARRAY[p_delay_us],
              '{}', '{}', NULL, '{}', '{}', NULL, NULL, '{}', '{}', '{}', NULL, NULL, '{}', '{}', '{}', '{}', '{}',
              NULL, '{}', '{}') e;
        RETURN new_id;
    END IF;
    run_after := CASE WHEN p_run_at <> '' THEN p_run_at::timestamptz
                      WHEN p_delay_us <> 0 THEN now() + p_delay_us * interval '1 microsecond'
                      ELSE now() END;
    INSERT INTO pgtask.jobs (queue, kind, is_head, status, priority, aging_ms, age_due, payload,
                             max_attempts, fail_blocks_group, run_after)
    VALUES (p_queue, p_kind, true,
            CASE WHEN run_after > now() THEN 'scheduled'::pgtask.job_status ELSE 'queued'::pgtask.job_status END,
            p_priority, p_aging_ms,
            CASE WHEN p_aging_ms > 0 AND p_priority > 0 THEN run_after + p_aging_ms * interval '1 millisecond' END,
            p_payload, p_max_attempts, p_fail_blocks_group, run_after)
    RETURNING id INTO new_id;
    -- The wake-up of enqueue_jobs (see there).
    IF run_after <= now() THEN
        PERFORM pg_advisory_xact_lock_shared(pgtask.enqueue_lock_class(), hashtext(p_queue));
        IF NOT (pg_try_advisory_lock(pgtask.idle_lock_class(), hashtext(p_queue))
                AND pg_advisory_unlock(pgtask.idle_lock_class(), hashtext(p_queue))) THEN
            PERFORM pg_notify('pgtask', new_id::text || ':' || p_queue);
        END IF;
    END IF;
    RETURN new_id;
END;
$$;

-- revision: 19
-- Concurrency limits: at most max_running jobs of a key run at once, across
-- every worker.
--
-- A limited job (limit_id set, never grouped) runs only while admitted,
-- which is_head marks as it marks a group's head. A job is admitted into a
-- free slot of its key (pgtask.limit_keys.free) and holds its slot while it
-- is queued or started; for each key, the admitted jobs and its free slots
-- add up to its limit, and free never goes below 0 by an admission: the
-- limit holds. Jobs not admitted wait, in jobs_limit_waiting, out of the
-- claim index.
--
-- Slots are taken when jobs start, by the claims (pick_admitted): a key
-- with free slots and jobs waiting (waiting) is ready, in limit_keys_ready,
-- and a claim takes waiting jobs of its queue's ready keys straight to
-- started and admitted, debiting the keys' rows in its own statement; keys
-- at their limit are not in that index, so a claim never reads them or
-- their jobs, however many there are. An enqueue admits its jobs into the
-- free slots it finds too (they go to the claim index). A job leaving
-- queued and started (it finished, was cancelled or deleted, or waits out
-- a retry's backoff or a snooze) frees its slot, through the triggers of
-- 0001_baseline.sql: a batch of outcomes gives its slots back to the keys'
-- rows once per key, in one statement (release_deferred_slots), and the
-- claim that follows in the same transaction admits into them. So a key
-- that does not bind costs a claim and a settle one write of its row each,
-- not a write of every job it admits (the jobs go from waiting to started
-- in one update).
--
-- The key's row is locked (FOR NO KEY UPDATE) to take or give back slots,
-- always with SKIP LOCKED by claims, finishers and enqueues with the queue
-- strategy, so none waits for another on a key's row. A finisher that finds
-- the row locked hands its slot on to the key's first waiting job without
-- the row instead (hand_on_slots: is_head set, the job announced), so an
-- enqueue that holds the row until its caller commits holds up no
-- admission; what no waiting job takes is left in pgtask.limit_checks,
-- which every worker's maintenance round applies (check_limits). The one
-- wait is an enqueue's for another's insert of a key's row that both
-- create (its first jobs): two transactions that each create two keys in
-- statements of their own, in opposite orders, deadlock there, and the
-- server fails one, as with two that enqueue the same new unique keys in
-- opposite orders.
--
-- waiting is set by whoever makes a job wait (an enqueue that leaves jobs
-- waiting, and the jobs_limit_waits trigger for a delayed job or a retry
-- made due, a job handed back or rescued from a run, an operator's retry:
-- limit_arm) under the row's lock, held until it commits, or, when someone
-- else holds it, by a check left for maintenance; a claim clears it when it
-- finds no job left. A claim that holds the row sees every job whose
-- waiting committed before, and one whose waiting is in flight holds the
-- row until it commits or comes with a check: no job waits on a key with a
-- free slot unseen. A key that becomes ready wakes its queue's workers,
-- or, when a claim of the queue follows in the same transaction, that
-- claim wakes them if a key of the queue is still ready after it (its room
-- or kinds may not take the key's jobs).
--
-- A fair queue's claims take heads by turn only (functions/fair.sql): there
-- a freed slot is handed on to the key's next waiting job (hand_on_slots),
-- which waits for its turn in the fair index, and limit_arm leaves a check.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- Makes the jobs p_ids of queue p_queue, just admitted, known to workers:
-- left for the claim that follows in the same transaction (see pick_heads)
-- when the caller said one does (pgtask.claiming, see settle_jobs), else
-- announced on pgtask_behind with the first one's id, since they may lie
-- behind the workers' cursors.
CREATE OR REPLACE FUNCTION pgtask.announce_admitted_ids(p_ids bigint[], p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN;
    ELSIF current_setting('pgtask.claiming', true) = 'on' THEN
        PERFORM set_config('pgtask.promoted',
                           concat_ws(',', nullif(current_setting('pgtask.promoted', true), ''), array_to_string(p_ids, ',')), true);
    ELSE
        PERFORM pg_notify('pgtask_behind', (SELECT min(u) FROM unnest(p_ids) u) || ':' || p_queue);
    END IF;
END;
$$;

-- Admits up to p_room waiting jobs of key p_key, by priority then id, and
-- returns their ids. The caller holds
-- the key's row and takes the slots from it, or hands on slots it frees.
--
-- A job admitted leaves its entry in the index of waiting jobs until vacuum
-- removes it, and one admitted by a transaction still open is locked and
-- looks waiting to everyone else: a scan from the key's start steps over
-- them all. A transaction that admits many jobs of a key (a batch of
-- outcomes, each handing its slot on) would step over its own earlier ones
-- each time. So it remembers where it admitted last (pgtask.limit_frontier,
-- for the key it admitted last), and looks from there first; from the
-- key's start only when nothing waits from there on, and then it sees any
-- job that came to wait behind (a hand-back, a retry made due, a better
-- priority). The lists are read into arrays and the rows changed by id: a
-- plan that joined the pick to the table was seen scanning it whole.
CREATE OR REPLACE FUNCTION pgtask.admit_waiting_ids(p_key bigint, p_room integer) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    frontier text[] := string_to_array(nullif(current_setting('pgtask.limit_frontier', true), ''), ',');
    ids bigint[] := '{}';
    prios smallint[] := '{}';
    more bigint[];
    more_prios smallint[];
BEGIN
    IF p_room <= 0 THEN
        RETURN '{}';
    END IF;
    IF frontier[1] = p_key::text THEN
        SELECT coalesce(array_agg(w.id ORDER BY w.priority, w.id), '{}'), coalesce(array_agg(w.priority ORDER BY w.priority, w.id), '{}')
          INTO ids, prios
          FROM (SELECT id, priority FROM pgtask.jobs
                 WHERE limit_id = p_key AND status = 'queued' AND NOT is_head
                   AND (priority, id) > (frontier[2]::smallint, frontier[3]::bigint)
                 ORDER BY priority, id
                 LIMIT p_room
                   FOR UPDATE SKIP LOCKED) w;
    END IF;
    IF cardinality(ids) < p_room THEN
        SELECT coalesce(array_agg(w.id ORDER BY w.priority, w.id), '{}'), coalesce(array_agg(w.priority ORDER BY w.priority, w.id), '{}')
          INTO more, more_prios
          FROM (SELECT id, priority FROM pgtask.jobs
                 WHERE limit_id = p_key AND status = 'queued' AND NOT is_head AND id <> ALL (ids)
                 ORDER BY priority, id
                 LIMIT p_room - cardinality(ids)
                   FOR UPDATE SKIP LOCKED) w;
        ids := ids || more;
        prios := prios || more_prios;
    END IF;
    IF cardinality(ids) = 0 THEN
        RETURN ids;
    END IF;
    UPDATE pgtask.jobs SET is_head = true WHERE id = ANY (ids);
    PERFORM set_config('pgtask.limit_frontier', (
        SELECT p_key || ',' || u.p || ',' || u.i FROM unnest(prios, ids) AS u(p, i) ORDER BY u.p DESC, u.i DESC LIMIT 1), true);
    RETURN ids;
END;
$$;

-- A limited job's slot, freed (see the top of this file): handed on to the
-- next job of the run the job's claim (p_token, NULL: none) took behind it,
-- or to the key's first waiting job, or given back to the key's row; left
-- in limit_checks when that row is locked by someone else. A waiting job
-- locked by someone else (an operator's cancel, aging) is passed over; if
-- one is, the slot given back comes with a check, so that maintenance
-- admits the job should that someone let it go still waiting.
CREATE OR REPLACE FUNCTION pgtask.release_slot(p_key bigint, p_queue text, p_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pgtask.pass_on_in_run(p_key, p_token) THEN
        PERFORM pgtask.release_slots(p_key, p_queue, 1);
    END IF;
END;
$$;

-- Whether the slot of a job that ran at the head of a run its claim
-- (p_token, NULL: none) took (see pick_limited_runs) passed to the run's
-- next job, which the same runner runs after it.
CREATE OR REPLACE FUNCTION pgtask.pass_on_in_run(p_key bigint, p_token bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    nxt bigint;
BEGIN
    IF p_token IS NULL THEN
        RETURN false;
    END IF;
    UPDATE pgtask.jobs SET is_head = true
     WHERE id = (SELECT id FROM pgtask.jobs
                  WHERE limit_id = p_key AND claim_token = p_token AND status = 'started' AND NOT is_head
                  ORDER BY limit_id, claim_token, id LIMIT 1)
    RETURNING id INTO nxt;
    RETURN nxt IS NOT NULL;
END;
$$;

-- p_n freed slots of key p_key, of queue p_queue, handed on to the key's
-- first waiting jobs without the key's row (see release_slots for when),
-- or given back to the row; left in limit_checks when that row is locked
-- by someone else. A waiting job locked by someone
-- else (an operator's cancel, aging) is passed over; if one is, the slots
-- given back come with a check, so that maintenance admits the job should
-- that someone let it go still waiting.
CREATE OR REPLACE FUNCTION pgtask.hand_on_slots(p_key bigint, p_queue text, p_n integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k record;
    ids bigint[];
    left_over integer := p_n;
BEGIN
    IF p_n <= 0 THEN
        RETURN;
    END IF;
    -- Read without a lock: a limit lowered below the jobs admitted leaves
    -- free below 0, and a slot then goes back to the row instead.
    SELECT free INTO k FROM pgtask.limit_keys WHERE id = p_key;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF k.free >= 0 THEN
        ids := pgtask.admit_waiting_ids(p_key, left_over);
        PERFORM pgtask.announce_admitted_ids(ids, p_queue);
        left_over := left_over - cardinality(ids);
        IF left_over = 0 THEN
            RETURN;
        END IF;
    END IF;
    SELECT free INTO k FROM pgtask.limit_keys WHERE id = p_key FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        INSERT INTO pgtask.limit_checks (key_id, released) VALUES (p_key, left_over);
        RETURN;
    END IF;
    -- With the row held, a job whose enqueue committed since the look above
    -- is seen now (each statement takes a new snapshot); one still in
    -- flight commits with a check of its own.
    IF k.free >= 0 THEN
        ids := pgtask.admit_waiting_ids(p_key, left_over);
        PERFORM pgtask.announce_admitted_ids(ids, p_queue);
        left_over := left_over - cardinality(ids);
        IF left_over = 0 THEN
            RETURN;
        END IF;
    END IF;
    UPDATE pgtask.limit_keys SET free = free + left_over WHERE id = p_key;
    IF k.free >= 0 AND EXISTS (SELECT 1 FROM pgtask.jobs WHERE limit_id = p_key AND status = 'queued' AND NOT is_head) THEN
        INSERT INTO pgtask.limit_checks (key_id) VALUES (p_key);
    END IF;
END;
$$;

-- p_n freed slots of key p_key, of queue p_queue, given back to the key's
-- row under its lock, taken with SKIP LOCKED: the claims admit the key's
-- waiting jobs into them (see pick_admitted). A key that becomes ready so
-- wakes its queue's workers, unless a claim follows in this transaction
-- (see wake_for_limit). Handed on to the key's waiting jobs without the
-- row instead (hand_on_slots) when the row is locked by someone else, so
-- that an enqueue that holds it until its caller commits holds up no
-- admission; and always in a fair queue, whose claims take heads by turn
-- only (see functions/fair.sql): its admitted jobs wait for their turn in
-- its index.
CREATE OR REPLACE FUNCTION pgtask.release_slots(p_key bigint, p_queue text, p_n integer) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    k record;
BEGIN
    IF p_n <= 0 THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        SELECT free, waiting INTO k FROM pgtask.limit_keys WHERE id = p_key FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE pgtask.limit_keys
               SET free = free + p_n,
                   ready_since = CASE WHEN free <= 0 AND free + p_n > 0 THEN clock_timestamp() ELSE ready_since END
             WHERE id = p_key;
            IF k.waiting AND k.free <= 0 AND k.free + p_n > 0 THEN
                PERFORM pgtask.wake_for_limit(p_queue);
            END IF;
            RETURN;
        END IF;
    END IF;
    PERFORM pgtask.hand_on_slots(p_key, p_queue, p_n);
END;
$$;

-- Wakes the workers of queue p_queue for a limit key that became ready,
-- unless a claim of the queue follows in this transaction (pgtask.claiming,
-- see settle_jobs): the queue is left in pgtask.limit_wakes for that
-- claim, which admits what it has room and kinds for and then wakes the
-- workers if a key is still ready (wake_for_ready_keys).
CREATE OR REPLACE FUNCTION pgtask.wake_for_limit(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pgtask.claiming', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_notify('pgtask', p_queue);
    ELSE
        PERFORM set_config('pgtask.limit_wakes',
                           (coalesce(nullif(current_setting('pgtask.limit_wakes', true), '')::text[], '{}') || p_queue)::text,
                           true);
    END IF;
END;
$$;

-- For a claim of queue p_queue, after it admitted what it could: the
-- wakes left to it (see wake_for_limit) sent, once each per transaction,
-- for a queue other than the claim's, or for the claim's when a key of it
-- is still ready (the claim had no room, or no handler, for its jobs).
CREATE OR REPLACE FUNCTION pgtask.wake_for_ready_keys(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    woke text[] := nullif(current_setting('pgtask.limit_wakes', true), '')::text[];
    q text;
BEGIN
    IF woke IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('pgtask.limit_wakes', '', true);
    FOR q IN SELECT DISTINCT u FROM unnest(woke) u LOOP
        IF q IS DISTINCT FROM p_queue
           OR EXISTS (SELECT 1 FROM pgtask.limit_keys k WHERE k.queue = q AND k.waiting AND k.free > 0) THEN
            PERFORM pg_notify('pgtask', q);
        END IF;
    END LOOP;
END;
$$;

-- The slots freed while pgtask.defer_slots was on (see limit_release),
-- released now, each key's together: a batch of outcomes gives its slots
-- back to the keys' rows in one statement, whatever the number of keys,
-- locking them with SKIP LOCKED; a key whose row someone else holds, or of
-- a fair queue, goes through release_slots. Turns the deferring off.
CREATE OR REPLACE FUNCTION pgtask.release_deferred_slots() RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    freed text := nullif(current_setting('pgtask.deferred_slots', true), '');
    eks bigint[];
    ets bigint[];
    ens integer[];
    nexts bigint[];
    passed bigint[];
    kids bigint[];
    ns integer[];
    given bigint[];
    woke text[];
    r record;
BEGIN
    PERFORM set_config('pgtask.defer_slots', 'off', true);
    PERFORM set_config('pgtask.deferred_slots', '', true);
    IF freed IS NULL THEN
        RETURN;
    END IF;
    -- Each key and claim token (see pass_on_in_run) once, with its slots.
    SELECT array_agg(x.k), array_agg(x.t), array_agg(x.n) INTO eks, ets, ens
      FROM (SELECT split_part(f, ':', 1)::bigint AS k, nullif(split_part(f, ':', 2), '')::bigint AS t, count(*)::integer AS n
              FROM unnest(string_to_array(freed, ',')) f
             GROUP BY 1, 2) x;
    -- The slots of jobs that ran at the head of a run pass to the run's
    -- next jobs still started (as pass_on_in_run does one at a time), all
    -- in one statement.
    SELECT coalesce(array_agg(nx.id), '{}'), coalesce(array_agg(u.k), '{}') INTO nexts, passed
      FROM unnest(eks, ets, ens) AS u(k, t, n)
      CROSS JOIN LATERAL (
          SELECT j.id FROM pgtask.jobs j
           WHERE j.limit_id = u.k AND j.claim_token = u.t AND j.status = 'started' AND NOT j.is_head
           ORDER BY j.limit_id, j.claim_token, j.id
           LIMIT u.n) nx
     WHERE u.t IS NOT NULL;
    IF cardinality(nexts) > 0 THEN
        UPDATE pgtask.jobs SET is_head = true WHERE id = ANY (nexts);
    END IF;
    -- Each key once, with its slots; the rows locked and written by id (a
    -- join of the rows to the list was planned as a scan of the table).
    SELECT coalesce(array_agg(f.k ORDER BY f.k), '{}'), coalesce(array_agg(f.n ORDER BY f.k), '{}') INTO kids, ns
      FROM (SELECT u.k, sum(u.n)::integer - (SELECT count(*) FROM unnest(passed) p WHERE p = u.k)::integer AS n
              FROM unnest(eks, ens) AS u(k, n)
             GROUP BY u.k) f
     WHERE f.n > 0;
    IF cardinality(kids) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(array_agg(k.id), '{}') INTO given
      FROM (SELECT id, queue FROM pgtask.limit_keys WHERE id = ANY (kids) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED) k
     WHERE NOT EXISTS (SELECT 1 FROM pgtask.fair_queues q WHERE q.queue = k.queue);
    WITH back AS (
        UPDATE pgtask.limit_keys k
           SET free = k.free + u.n,
               ready_since = CASE WHEN k.free <= 0 AND k.free + u.n > 0 THEN clock_timestamp() ELSE k.ready_since END
          FROM unnest(kids, ns) AS u(id, n)
         WHERE k.id = ANY (given) AND k.id = u.id
        RETURNING k.queue, k.waiting AND k.free > 0 AND k.free - u.n <= 0 AS ready
    )
    SELECT coalesce(array_agg(DISTINCT b.queue) FILTER (WHERE b.ready), '{}') INTO woke FROM back b;
    PERFORM pgtask.wake_for_limit(q) FROM unnest(woke) q;
    IF cardinality(given) = cardinality(kids) THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT u.key_id, u.n, (SELECT k.queue FROM pgtask.limit_keys k WHERE k.id = u.key_id) AS queue
          FROM unnest(kids, ns) AS u(key_id, n)
         WHERE u.key_id <> ALL (given)
         ORDER BY u.key_id
    LOOP
        PERFORM pgtask.release_slots(r.key_id, r.queue, r.n);
    END LOOP;
END;
$$;

-- The BEFORE UPDATE trigger on jobs (see 0001_baseline.sql): a limited job
-- leaving queued and started is no longer admitted. A retry's backoff and a
-- snooze give the slot up too: the job is admitted again when it is due.
CREATE OR REPLACE FUNCTION pgtask.limit_unadmit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.is_head := false;
    RETURN NEW;
END;
$$;

-- The AFTER UPDATE and AFTER DELETE triggers on jobs: an admitted job's
-- slot is freed.
CREATE OR REPLACE FUNCTION pgtask.limit_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('pgtask.defer_slots', true) = 'on' THEN
        -- A batch of outcomes (settle_jobs): released together at its end.
        PERFORM set_config('pgtask.deferred_slots',
                           concat_ws(',', nullif(current_setting('pgtask.deferred_slots', true), ''),
                                     OLD.limit_id || ':' || coalesce(OLD.claim_token::text, '')), true);
        RETURN NULL;
    END IF;
    PERFORM pgtask.release_slot(OLD.limit_id, OLD.queue, OLD.claim_token);
    RETURN NULL;
END;
$$;

-- The AFTER UPDATE trigger on jobs: a limited job came to wait (see
-- jobs_limit_waits in 0001_baseline.sql).
CREATE OR REPLACE FUNCTION pgtask.limit_waits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.limit_arm(NEW.limit_id);
    RETURN NULL;
END;
$$;

-- Marks key p_key waiting, a job of it having come to wait, under its
-- row's lock, taken with SKIP LOCKED and held until the caller commits
-- (claims skip the key meanwhile, and see the job once it commits), or,
-- when someone else holds it, by a check left for maintenance. The key's
-- next claim looks for its jobs from the start (the job may lie before
-- the frontier), and a key with free slots wakes its queue's workers. In
-- a fair queue, where claims admit nothing, maintenance admits the job
-- (check_limits).
CREATE OR REPLACE FUNCTION pgtask.limit_arm(p_key bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k record;
BEGIN
    SELECT queue, free, waiting, frontier_id INTO k FROM pgtask.limit_keys WHERE id = p_key FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = k.queue) THEN
        INSERT INTO pgtask.limit_checks (key_id) VALUES (p_key);
        RETURN;
    END IF;
    IF NOT k.waiting OR k.frontier_id IS NOT NULL THEN
        UPDATE pgtask.limit_keys
           SET waiting = true, frontier_priority = NULL, frontier_id = NULL,
               ready_since = CASE WHEN waiting THEN ready_since ELSE clock_timestamp() END
         WHERE id = p_key;
    END IF;
    IF k.free > 0 THEN
        PERFORM pgtask.wake_for_limit(k.queue);
    END IF;
END;
$$;

-- For a claim of queue p_queue: admits waiting jobs of the queue's ready
-- keys (free slots, jobs waiting: limit_keys_ready), taking the slots from
-- the keys' rows, up to p_room jobs. Keys are taken in ready_since order,
-- and each key that gives jobs goes to the back, so every ready key's turn
-- comes round. A key's jobs go by priority, then id. Locks what it returns
-- (FOR UPDATE); the caller starts the jobs, admitted ones marked is_head,
-- in the same statement.
--
-- p_run_max 0 (lease mode): each job takes a slot, up to the key's free
-- slots. p_run_max above 0 (held mode, whose runner runs its batch one job
-- at a time): a key gives one admitted job, which takes one slot, and, to
-- fill the room, a run of up to p_run_max - 1 of its next waiting jobs
-- behind it (followers, not admitted), which the runner works off on that
-- one slot as pick_limited_runs' runs (see pass_on_in_run). keys are the
-- keys it took jobs of.
--
-- The key rows are read without a lock in ready order, as many as can fill
-- the room, then locked with SKIP LOCKED: no claim waits for another, or for
-- an enqueue that holds a key's row, and none takes a slot another took. A
-- key's jobs are looked for from its frontier (the last job a claim took of
-- it) on: the index entries before it are those of jobs admitted before,
-- which stay until vacuum removes them. A job that comes to wait before the
-- frontier moves it back (limit_arm, an enqueue, check_limits). A key that
-- comes up short of its slots is looked at from its start: it stays
-- waiting, and its frontier goes, if any job still waits (one locked by
-- someone else, or of a kind not in p_kinds); else it is no longer
-- waiting, and drops out of limit_keys_ready until a job comes to wait.
-- A held claim that gets nothing of a key whose jobs still wait leaves
-- its row unwritten. Keys marked waiting whose jobs were cancelled or
-- deleted stay ready until a claim looks at them: each claim looks at a
-- bounded number of keys (see the held loop), so such keys cost the
-- claims a few rows each, once.
--
-- Every look at a key's waiting jobs asks for the first of them in the
-- index's order (ORDER BY priority, id LIMIT 1), from the frontier given
-- as a bound of the index's range (a NULL frontier as the lowest (priority,
-- id)), never as EXISTS or as "no frontier, or after it": with statistics
-- taken while one key held every job of the table, the generic plans
-- scanned the whole table for each such test, expecting a match at once,
-- and every claim read every job the key had run before
-- (TestAClaimReadsAKeysJobsFromItsFrontier). Whether a claim passed over
-- a job before the last it took is the first job it did not take,
-- compared with that last one: an upper bound of (priority, id) in the
-- scan's condition does not end a scan of the index, whose order stops at
-- the priority, so the look went on through every job waiting after it.
CREATE OR REPLACE FUNCTION pgtask.pick_admitted(p_queue text, p_room integer, p_run_max integer, p_kinds text[],
                                                OUT admitted bigint[], OUT followers bigint[], OUT keys bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    cand bigint[];
    kids bigint[];
    frees integer[];
    fps smallint[];
    fis bigint[];
    wants integer[];
    room integer := p_room;
    got bigint[];
    got_keys bigint[];
    got_prios smallint[];
    run bigint[];
    run_prios smallint[];
    stills boolean[];
    kid bigint;
    kr record;
    keys_seen bigint[] := '{}';
    last_rs timestamptz;
    last_id bigint;
    still boolean;
    passed boolean;
BEGIN
    admitted := '{}';
    followers := '{}';
    keys := '{}';
    IF p_room <= 0 THEN
        RETURN;
    END IF;
    IF p_run_max > 0 THEN
        -- Held mode: key by key, each giving a run as long as the room
        -- allows, so that a claim writes few keys' rows. One key at a
        -- time: a loop over a query would lock several keys' rows ahead,
        -- which the claims beside this one would skip until it commits.
        -- The keys are walked in ready order from where the last one was,
        -- at most 2 * p_room + 2 of them: keys that give nothing (their
        -- jobs gone, or locked by someone else) cost a claim a bounded
        -- look, not one of every ready key. A key whose jobs waiting are
        -- all of kinds not in p_kinds is passed over in the walk, unread
        -- and unwritten.
        WHILE room > 0 AND cardinality(keys_seen) < 2 * p_room + 2 LOOP
            SELECT k.id, k.ready_since INTO kid, last_rs FROM pgtask.limit_keys k
             WHERE k.queue = p_queue AND k.waiting AND k.free > 0
               AND (last_id IS NULL OR (k.ready_since, k.id) > (last_rs, last_id))
               AND k.id <> ALL (keys_seen)
               AND (p_kinds IS NULL
                    OR (SELECT j.id FROM pgtask.jobs j
                         WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head
                           AND (j.priority, j.id) > (coalesce(k.frontier_priority, -32768), coalesce(k.frontier_id, -9223372036854775808))
                           AND j.kind = ANY (p_kinds)
                         ORDER BY j.priority, j.id LIMIT 1) IS NOT NULL
                    OR (SELECT j.id FROM pgtask.jobs j
                         WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head
                           AND (j.priority, j.id) > (coalesce(k.frontier_priority, -32768), coalesce(k.frontier_id, -9223372036854775808))
                         ORDER BY j.priority, j.id LIMIT 1) IS NULL)
             ORDER BY k.ready_since, k.id
             LIMIT 1;
            EXIT WHEN NOT FOUND;
            last_id := kid;
            keys_seen := keys_seen || kid;
            SELECT free, waiting, frontier_priority, frontier_id INTO kr FROM pgtask.limit_keys
             WHERE id = kid
               FOR NO KEY UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND OR NOT kr.waiting OR kr.free <= 0;
            SELECT coalesce(array_agg(f.id ORDER BY f.priority, f.id), '{}'),
                   coalesce(array_agg(f.priority ORDER BY f.priority, f.id), '{}')
              INTO run, run_prios FROM (
                SELECT j.id, j.priority FROM pgtask.jobs j
                 WHERE j.limit_id = kid AND j.status = 'queued' AND NOT j.is_head
                   AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
                   AND (j.priority, j.id) > (coalesce(kr.frontier_priority, -32768), coalesce(kr.frontier_id, -9223372036854775808))
                 ORDER BY j.priority, j.id
                 LIMIT least(room, p_run_max)
                   FOR UPDATE SKIP LOCKED) f;
            -- Whether a job still waits, and whether one waits before the
            -- last taken that this claim passed over (locked by someone
            -- else, or of a kind not in p_kinds): the frontier never moves
            -- past it, so that no later job passes it.
            still := cardinality(run) = least(room, p_run_max)
                     OR (SELECT j.id FROM pgtask.jobs j
                          WHERE j.limit_id = kid AND j.status = 'queued' AND NOT j.is_head
                            AND j.id <> ALL (run)
                          ORDER BY j.priority, j.id LIMIT 1) IS NOT NULL;
            passed := cardinality(run) > 0 AND coalesce((
                SELECT (j.priority, j.id) < (run_prios[cardinality(run)], run[cardinality(run)]) FROM pgtask.jobs j
                 WHERE j.limit_id = kid AND j.status = 'queued' AND NOT j.is_head
                   AND (j.priority, j.id) > (coalesce(kr.frontier_priority, -32768), coalesce(kr.frontier_id, -9223372036854775808))
                   AND j.id <> ALL (run)
                 ORDER BY j.priority, j.id LIMIT 1), false);
            IF cardinality(run) = 0 AND still THEN
                -- Nothing for this claim (jobs of other kinds, or locked):
                -- the key's row is left as it is.
                CONTINUE;
            END IF;
            IF cardinality(run) > 0 THEN
                admitted := admitted || run[1];
                followers := followers || run[2:];
                keys := keys || kid;
            END IF;
            UPDATE pgtask.limit_keys
               SET free = free - least(cardinality(run), 1), ready_since = clock_timestamp(),
                   waiting = still,
                   frontier_priority = CASE WHEN passed THEN frontier_priority
                                            WHEN cardinality(run) = least(room, p_run_max) THEN run_prios[cardinality(run)] END,
                   frontier_id = CASE WHEN passed THEN frontier_id
                                      WHEN cardinality(run) = least(room, p_run_max) THEN run[cardinality(run)] END
             WHERE id = kid;
            room := room - cardinality(run);
        END LOOP;
        RETURN;
    END IF;
    -- Lease mode: as many keys at once as can fill the room.
    SELECT coalesce(array_agg(c.id ORDER BY c.ready_since, c.id), '{}') INTO cand FROM (
        SELECT r.id, r.ready_since FROM (
            SELECT id, ready_since, free, sum(free) OVER (ORDER BY ready_since, id) AS upto
              FROM pgtask.limit_keys
             WHERE queue = p_queue AND waiting AND free > 0
               -- Not a key whose jobs waiting are all of kinds not in
               -- p_kinds: it would fill the room with nothing, before the
               -- keys this claim can take from.
               AND (p_kinds IS NULL
                    OR (SELECT j.id FROM pgtask.jobs j
                         WHERE j.limit_id = limit_keys.id AND j.status = 'queued' AND NOT j.is_head
                           AND (j.priority, j.id) > (coalesce(limit_keys.frontier_priority, -32768),
                                                     coalesce(limit_keys.frontier_id, -9223372036854775808))
                           AND j.kind = ANY (p_kinds)
                         ORDER BY j.priority, j.id LIMIT 1) IS NOT NULL
                    OR (SELECT j.id FROM pgtask.jobs j
                         WHERE j.limit_id = limit_keys.id AND j.status = 'queued' AND NOT j.is_head
                           AND (j.priority, j.id) > (coalesce(limit_keys.frontier_priority, -32768),
                                                     coalesce(limit_keys.frontier_id, -9223372036854775808))
                         ORDER BY j.priority, j.id LIMIT 1) IS NULL)
             ORDER BY ready_since, id
             LIMIT p_room) r
         WHERE r.upto - r.free < p_room) c;
    IF cardinality(cand) = 0 THEN
        RETURN;
    END IF;
    -- Locked by id alone: a test of waiting and free here would match the
    -- ready index, and its generic plan read that index whole.
    SELECT coalesce(array_agg(k.id ORDER BY k.ready_since, k.id), '{}'), coalesce(array_agg(k.free ORDER BY k.ready_since, k.id), '{}'),
           coalesce(array_agg(k.frontier_priority ORDER BY k.ready_since, k.id), '{}'),
           coalesce(array_agg(k.frontier_id ORDER BY k.ready_since, k.id), '{}')
      INTO kids, frees, fps, fis
      FROM (SELECT id, free, waiting, ready_since, frontier_priority, frontier_id FROM pgtask.limit_keys
             WHERE id = ANY (cand)
             ORDER BY id
               FOR NO KEY UPDATE SKIP LOCKED) k
     WHERE k.waiting AND k.free > 0;
    IF cardinality(kids) = 0 THEN
        RETURN;
    END IF;
    wants := '{}';
    FOR i IN 1 .. cardinality(kids) LOOP
        wants := wants || least(frees[i], room);
        room := room - wants[i];
    END LOOP;
    SELECT coalesce(array_agg(w.id ORDER BY u.ord, w.priority, w.id), '{}'),
           coalesce(array_agg(u.kid ORDER BY u.ord, w.priority, w.id), '{}'),
           coalesce(array_agg(w.priority ORDER BY u.ord, w.priority, w.id), '{}')
      INTO got, got_keys, got_prios
      FROM unnest(kids, wants, fps, fis) WITH ORDINALITY AS u(kid, want, fp, fi, ord)
      CROSS JOIN LATERAL (
          SELECT j.id, j.priority FROM pgtask.jobs j
           WHERE j.limit_id = u.kid AND j.status = 'queued' AND NOT j.is_head
             AND (p_kinds IS NULL OR j.kind = ANY (p_kinds))
             AND (j.priority, j.id) > (coalesce(u.fp, -32768), coalesce(u.fi, -9223372036854775808))
           ORDER BY j.priority, j.id
           LIMIT u.want
             FOR UPDATE SKIP LOCKED) w
     WHERE u.want > 0;
    admitted := got;
    -- Each key: its slots taken (the admitted jobs), its frontier moved to
    -- the last job taken, to the back of the ready keys; one that came up
    -- short stays waiting only while a job of it still waits. Worked out
    -- in arrays and written by id: a join of the rows to a list of the
    -- keys was planned as a scan of the whole table.
    -- A frontier never moves past a job the claim passed over (locked by
    -- someone else, or of a kind not in p_kinds): the key's frontier stays
    -- where it was then, so that no later job passes it.
    SELECT array_agg(u.kid ORDER BY u.ord),
           array_agg(x.n ORDER BY u.ord),
           array_agg(CASE WHEN x.passed THEN u.fp WHEN x.n >= u.want THEN x.last_p END ORDER BY u.ord),
           array_agg(CASE WHEN x.passed THEN u.fi WHEN x.n >= u.want THEN x.last_i END ORDER BY u.ord),
           array_agg(x.n >= u.want OR (SELECT j.id FROM pgtask.jobs j
                                        WHERE j.limit_id = u.kid AND j.status = 'queued' AND NOT j.is_head
                                          AND j.id <> ALL (got)
                                        ORDER BY j.priority, j.id LIMIT 1) IS NOT NULL ORDER BY u.ord)
      INTO kids, wants, fps, fis, stills
      FROM unnest(kids, wants, fps, fis) WITH ORDINALITY AS u(kid, want, fp, fi, ord)
      CROSS JOIN LATERAL (
          SELECT (SELECT count(*) FROM unnest(got_keys) a WHERE a = u.kid)::integer AS n,
                 l.p AS last_p, l.i AS last_i,
                 l.i IS NOT NULL AND coalesce((
                     SELECT (j.priority, j.id) < (l.p, l.i) FROM pgtask.jobs j
                      WHERE j.limit_id = u.kid AND j.status = 'queued' AND NOT j.is_head
                        AND (j.priority, j.id) > (coalesce(u.fp, -32768), coalesce(u.fi, -9223372036854775808))
                        AND j.id <> ALL (got)
                      ORDER BY j.priority, j.id LIMIT 1), false) AS passed
            FROM (SELECT 1) one
            LEFT JOIN LATERAL (
                SELECT g.p, g.id AS i FROM unnest(got, got_keys, got_prios) AS g(id, kid, p) WHERE g.kid = u.kid
                 ORDER BY g.p DESC, g.id DESC LIMIT 1) l ON true
          OFFSET 0) x
     WHERE u.want > 0;
    UPDATE pgtask.limit_keys k
       SET free = k.free - u.n, waiting = u.still, ready_since = clock_timestamp(),
           frontier_priority = u.fp, frontier_id = u.fi
      FROM unnest(kids, wants, fps, fis, stills) AS u(kid, n, fp, fi, still)
     WHERE k.id = ANY (kids) AND k.id = u.kid;
    keys := ARRAY(SELECT DISTINCT g FROM unnest(got_keys) g);
END;
$$;

-- The limit in force for a key: an override of the key, else one for every
-- key of its queue (not for the queue's own limit, key ''), else p_declared.
CREATE OR REPLACE FUNCTION pgtask.limit_in_force(p_queue text, p_key text, p_declared integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT o.max_running FROM pgtask.limit_overrides o WHERE o.queue = p_queue AND o.limit_key = p_key),
        (SELECT o.max_running FROM pgtask.limit_overrides o
          WHERE p_key <> '' AND o.queue = p_queue AND o.limit_key IS NULL),
        p_declared)
$$;

-- Applies the keys' pending checks (pgtask.limit_checks), up to p_limit
-- keys, each under its row's lock taken with SKIP LOCKED (a key locked now
-- keeps its checks for a later round): slots given back, a changed declared
-- limit, then waiting jobs admitted into the free slots. Workers of each
-- queue with jobs admitted are woken with the first one's id. Returns how
-- many jobs it admitted.
--
-- A key's row may stay locked a long while: an enqueue holds it until its
-- transaction ends, and that is the caller's. The slots given back in its
-- checks meanwhile go to its waiting jobs all the same, as a finisher hands
-- its slot on, without the row: those checks are deleted as they are
-- taken, so no two rounds take one (a round that holds the row waits for
-- this one's delete of them, and finds them gone), and what no job takes
-- is left in a check again. Rounds take keys in id order, so none waits
-- for another that waits for it.
-- Unless the row says a lowered limit is still over-full (free below 0):
-- then the slots go to the row, later.
CREATE OR REPLACE FUNCTION pgtask.check_limits(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    k pgtask.limit_keys;
    given_back integer;
    now_declared integer;
    new_max integer;
    ids bigint[];
    total integer := 0;
    still boolean;
BEGIN
    FOR c IN
        SELECT DISTINCT key_id FROM pgtask.limit_checks ORDER BY key_id LIMIT p_limit
    LOOP
        SELECT * INTO k FROM pgtask.limit_keys WHERE id = c.key_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            SELECT * INTO k FROM pgtask.limit_keys WHERE id = c.key_id;
            IF NOT FOUND THEN
                DELETE FROM pgtask.limit_checks WHERE key_id = c.key_id;
            ELSIF k.free >= 0 AND EXISTS (SELECT 1 FROM pgtask.jobs j
                                           WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head) THEN
                WITH gone AS (
                    DELETE FROM pgtask.limit_checks WHERE key_id = c.key_id AND released > 0
                    RETURNING released
                )
                SELECT coalesce(sum(g.released), 0) INTO given_back FROM gone g;
                IF given_back > 0 THEN
                    ids := pgtask.admit_waiting_ids(k.id, given_back);
                    IF cardinality(ids) < given_back THEN
                        INSERT INTO pgtask.limit_checks (key_id, released) VALUES (k.id, given_back - cardinality(ids));
                    END IF;
                    PERFORM pgtask.announce_admitted_ids(ids, k.queue);
                    total := total + cardinality(ids);
                END IF;
            END IF;
            CONTINUE;
        END IF;
        -- Under the key's lock, so no one else applies these checks too.
        WITH gone AS (
            DELETE FROM pgtask.limit_checks WHERE key_id = c.key_id RETURNING id, released, declared
        )
        SELECT coalesce(sum(g.released), 0), (SELECT g2.declared FROM gone g2 WHERE g2.declared IS NOT NULL
                                                ORDER BY g2.id DESC LIMIT 1)
          INTO given_back, now_declared
          FROM gone g;
        k.free := k.free + given_back;
        IF now_declared IS NOT NULL THEN
            k.declared := now_declared;
            new_max := pgtask.limit_in_force(k.queue, k.limit_key, now_declared);
            k.free := k.free + new_max - k.max_running;
            k.max_running := new_max;
        END IF;
        ids := pgtask.admit_waiting_ids(k.id, k.free);
        k.free := k.free - cardinality(ids);
        -- Whether jobs still wait (the key's claims admit them when it has
        -- free slots; see pick_admitted), looked for from the key's start
        -- next: the check may be for a job before the frontier.
        still := EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head);
        -- A check that changes nothing (aging's, say, on a key at its
        -- limit) leaves no new version of the row behind.
        UPDATE pgtask.limit_keys
           SET free = k.free, declared = k.declared, max_running = k.max_running, waiting = still,
               frontier_priority = NULL, frontier_id = NULL,
               ready_since = CASE WHEN still AND NOT (waiting AND free > 0) THEN clock_timestamp() ELSE ready_since END
         WHERE id = k.id
           AND (free, declared, max_running, waiting, frontier_id) IS DISTINCT FROM (k.free, k.declared, k.max_running, still, NULL);
        IF k.free > 0 AND still THEN
            IF EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = k.queue) THEN
                -- Jobs it passed over, locked by someone else (see
                -- release_slot): looked at again next round.
                INSERT INTO pgtask.limit_checks (key_id) VALUES (k.id);
            ELSE
                PERFORM pgtask.wake_for_limit(k.queue);
            END IF;
        END IF;
        PERFORM pgtask.announce_admitted_ids(ids, k.queue);
        total := total + cardinality(ids);
    END LOOP;
    RETURN total;
END;
$$;

-- Sets (p_max) or clears (NULL) an operator's limit for key p_key of queue
-- p_queue, or for every key of it but the queue's own (p_key NULL), and
-- applies it to the keys' rows at once: a raised limit admits waiting jobs
-- (by maintenance's next round), a lowered one admits none until enough
-- admitted jobs have finished. Jobs already running go on. Returns how many
-- keys' rows it changed.
CREATE OR REPLACE FUNCTION pgtask.set_limit(p_queue text, p_key text, p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    changed integer := 0;
    k record;
    new_max integer;
BEGIN
    PERFORM pgtask.require_read_committed('setting a limit');
    IF p_max IS NOT NULL AND p_max < 1 THEN
        RAISE EXCEPTION 'pgtask.set_limit: a limit of % is below 1', p_max USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_max IS NULL THEN
        DELETE FROM pgtask.limit_overrides WHERE queue = p_queue AND limit_key IS NOT DISTINCT FROM p_key;
    ELSE
        INSERT INTO pgtask.limit_overrides AS o (queue, limit_key, max_running) VALUES (p_queue, p_key, p_max)
        ON CONFLICT ON CONSTRAINT limit_overrides_unique
        DO UPDATE SET max_running = excluded.max_running, set_at = now();
    END IF;
    FOR k IN
        SELECT id, limit_key, declared FROM pgtask.limit_keys
         WHERE queue = p_queue AND (limit_key = p_key OR (p_key IS NULL AND limit_key <> ''))
         ORDER BY limit_key
    LOOP
        new_max := pgtask.limit_in_force(p_queue, k.limit_key, k.declared);
        UPDATE pgtask.limit_keys SET free = free + new_max - max_running, max_running = new_max
         WHERE id = k.id AND max_running <> new_max;
        IF FOUND THEN
            changed := changed + 1;
            -- Waiting jobs may fit now: the queue's claims admit them,
            -- and maintenance looks at the key.
            INSERT INTO pgtask.limit_checks (key_id) VALUES (k.id);
        END IF;
    END LOOP;
    IF changed > 0 THEN
        PERFORM pg_notify('pgtask', p_queue);
    END IF;
    RETURN changed;
END;
$$;

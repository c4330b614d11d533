-- revision: 12
-- Concurrency limits: at most max_running jobs of a key run at once, across
-- every worker.
--
-- A limited job (limit_id set, never grouped) runs only while admitted,
-- which is_head marks as it marks a group's head: the claim index holds
-- runnable heads only, so jobs waiting on a key at its limit are not in it
-- and a claim never steps over them, however many there are. A job is
-- admitted into a free slot of its key (pgtask.limit_keys.free) and holds
-- its slot while it is queued or started; when it leaves those (it
-- finished, was cancelled or deleted, or waits out a retry's backoff or a
-- snooze) the triggers of 0001_baseline.sql hand the slot on:
--   - to the key's first waiting job (by priority, then id), without
--     touching the key's row: a key working off a backlog leaves its row
--     alone, so its lookups do not slow down while another session keeps a
--     transaction open (vacuum could remove none of the versions);
--   - or, with none waiting, back to the key's row (free + 1).
-- So, for each key, the admitted jobs and its free slots add up to its
-- limit, and free never goes below 0 by an admission: the limit holds.
--
-- The key's row is locked (FOR NO KEY UPDATE) to take or give back slots,
-- always with SKIP LOCKED by enqueues and finishers: an enqueue that finds
-- the row locked leaves its jobs waiting, and a finisher its slot, in
-- pgtask.limit_checks, which every worker's maintenance round applies
-- (check_limits). No enqueue or worker waits for another on a key's row.
-- The one wait is an enqueue's for another's insert of a key's row that
-- both create (its first jobs): two transactions that each create two keys
-- in statements of their own, in opposite orders, deadlock there, and the
-- server fails one, as with two that enqueue the same new unique keys in
-- opposite orders. A
-- waiting job's enqueue commits either while holding the row (then whoever
-- gives a slot back meanwhile leaves it in limit_checks) or with a check
-- of its own: a slot given back never misses a job that waits.
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
-- first waiting jobs, or given back to the key's row; left in limit_checks
-- when that row is locked by someone else. A waiting job locked by someone
-- else (an operator's cancel, aging) is passed over; if one is, the slots
-- given back come with a check, so that maintenance admits the job should
-- that someone let it go still waiting.
CREATE OR REPLACE FUNCTION pgtask.release_slots(p_key bigint, p_queue text, p_n integer) RETURNS void
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

-- The slots freed while pgtask.defer_slots was on (see limit_release),
-- released now, each key's together: a batch of outcomes of one key admits
-- its next jobs with one scan and one update, not one of each per job.
-- Turns the deferring off.
CREATE OR REPLACE FUNCTION pgtask.release_deferred_slots() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    freed text := nullif(current_setting('pgtask.deferred_slots', true), '');
    e record;
    keys bigint[] := '{}';
    r record;
BEGIN
    PERFORM set_config('pgtask.defer_slots', 'off', true);
    PERFORM set_config('pgtask.deferred_slots', '', true);
    IF freed IS NULL THEN
        RETURN;
    END IF;
    FOR e IN
        SELECT split_part(f, ':', 1)::bigint AS key_id, nullif(split_part(f, ':', 2), '')::bigint AS token
          FROM unnest(string_to_array(freed, ',')) f
    LOOP
        IF NOT pgtask.pass_on_in_run(e.key_id, e.token) THEN
            keys := keys || e.key_id;
        END IF;
    END LOOP;
    FOR r IN
        SELECT u.key_id, k.queue, count(*)::integer AS n
          FROM unnest(keys) AS u(key_id)
          JOIN pgtask.limit_keys k ON k.id = u.key_id
         GROUP BY u.key_id, k.queue
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
        -- A check that changes nothing (aging's, say, on a key at its
        -- limit) leaves no new version of the row behind.
        UPDATE pgtask.limit_keys SET free = k.free, declared = k.declared, max_running = k.max_running
         WHERE id = k.id AND (free, declared, max_running) IS DISTINCT FROM (k.free, k.declared, k.max_running);
        IF k.free > 0 AND EXISTS (SELECT 1 FROM pgtask.jobs j
                                   WHERE j.limit_id = k.id AND j.status = 'queued' AND NOT j.is_head) THEN
            -- Jobs it passed over, locked by someone else (see
            -- release_slot): looked at again next round.
            INSERT INTO pgtask.limit_checks (key_id) VALUES (k.id);
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
            -- Waiting jobs may fit now; maintenance admits them.
            INSERT INTO pgtask.limit_checks (key_id) VALUES (k.id);
        END IF;
    END LOOP;
    RETURN changed;
END;
$$;

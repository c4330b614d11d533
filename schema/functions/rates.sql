-- revision: 5
-- Rate limits: at most rate jobs of a key start per period, across every
-- worker, with bursts of at most burst (a token bucket per key, see
-- pgtask.rate_keys in 0001_baseline.sql).
--
-- A token is taken when a job starts, by the claim that starts it, never at
-- enqueue: so whatever the workers' lag, the starts of a key in any span of
-- time T are at most burst + rate * T / period. A rate-limited job
-- (rate_id set, never grouped, never limited) is never a head: it is not in
-- the claim index, so a claim never steps over jobs waiting for tokens. It
-- waits in jobs_rate_waiting, and a claim takes it from there: for each of
-- its queue's keys that are ready (ready_at passed, found in
-- rate_keys_ready), it refills the key's tokens from the clock, takes up to
-- as many of the key's waiting jobs as it has whole tokens and room, by
-- priority then id, and debits the key, in the claim's statement. The key's
-- row is locked with SKIP LOCKED: no claim waits for another, and none takes
-- a token another took.
--
-- ready_at is when the key's next token is due while jobs wait on it, NULL
-- while none do. A claim that finds no job left sets it NULL; so whoever
-- makes a job wait (an enqueue, a retry, a promotion, a hand-back, a rescue,
-- an operator's retry) marks the key ready again (rate_arm) under the
-- row's lock, held until it commits, or, when the row is locked by someone
-- else, leaves a check in pgtask.rate_checks, which the next maintenance
-- round applies (check_rates). Either way no waiting job is left with its
-- key not ready: a claim that holds the row sees every job whose waiting
-- committed before, and one whose waiting is in flight either holds the row
-- until it commits (the claim skips the key meanwhile) or comes with a check.
--
-- Workers read the first ready_at of their queues with each claim
-- (rate_wait_us) and sleep until then, or until woken: a key that becomes
-- ready wakes its queue's workers (pgtask channel). Nobody polls a key.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.

-- The tokens key k has at p_now: what it had, plus what its rate gave since
-- it was last refilled, up to its burst.
CREATE OR REPLACE FUNCTION pgtask.rate_tokens(k pgtask.rate_keys, p_now timestamptz) RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT least(k.burst::double precision,
                 k.tokens + greatest(extract(epoch FROM p_now - k.refilled_at)::double precision, 0)
                            * 1e6 * k.rate / k.period_us)
$$;

-- When a key with p_tokens at p_now and the rate p_rate per p_period_us has
-- a whole token.
CREATE OR REPLACE FUNCTION pgtask.rate_token_at(p_tokens double precision, p_now timestamptz, p_rate integer,
                                                p_period_us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_tokens >= 1 THEN p_now
                ELSE p_now + ceil((1 - p_tokens) * p_period_us / p_rate) * interval '1 microsecond' END
$$;

-- The rate in force for a key: an operator's override, else the declared one.
CREATE OR REPLACE FUNCTION pgtask.rate_in_force(p_queue text, p_key text, p_rate integer, p_period_us bigint,
                                                p_burst integer, OUT rate integer, OUT period_us bigint, OUT burst integer)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(o.rate, p_rate), coalesce(o.period_us, p_period_us), coalesce(o.burst, p_burst)
      FROM (SELECT 1) one
      LEFT JOIN pgtask.rate_overrides o ON o.queue = p_queue AND o.rate_key = p_key
$$;

-- Marks key p_key ready, its job (p_priority, p_id) having come to wait
-- (see the top of this file): under its row's lock, taken with SKIP LOCKED
-- and held until the caller commits, or, when someone else holds it, by a
-- check left for maintenance. A key that was not ready wakes its queue's
-- workers. A job before the key's frontier moves it back (see pick_rated).
CREATE OR REPLACE FUNCTION pgtask.rate_arm(p_key bigint, p_priority smallint, p_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k pgtask.rate_keys;
    now_ts timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO k FROM pgtask.rate_keys WHERE id = p_key FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        INSERT INTO pgtask.rate_checks (key_id) VALUES (p_key);
        RETURN;
    END IF;
    IF k.ready_at IS NULL OR (p_priority, p_id) <= (k.frontier_priority, k.frontier_id) THEN
        UPDATE pgtask.rate_keys
           SET ready_at = coalesce(ready_at, pgtask.rate_token_at(pgtask.rate_tokens(k, now_ts), now_ts, k.rate, k.period_us)),
               frontier_priority = NULL, frontier_id = NULL
         WHERE id = p_key;
    END IF;
    IF k.ready_at IS NULL THEN
        PERFORM pg_notify('pgtask', k.queue);
    END IF;
END;
$$;

-- The AFTER UPDATE trigger on jobs: a rate-limited job came to wait.
CREATE OR REPLACE FUNCTION pgtask.rate_waits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgtask.rate_arm(NEW.rate_id, NEW.priority, NEW.id);
    RETURN NULL;
END;
$$;

-- The BEFORE UPDATE trigger on jobs: a rate-limited job is never a head,
-- whatever else an update says (an operator's retry makes an ungrouped job
-- one).
CREATE OR REPLACE FUNCTION pgtask.rate_unhead() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.is_head := false;
    RETURN NEW;
END;
$$;

-- For a claim of queue p_queue: takes up to p_room waiting jobs of the
-- queue's ready keys, each key giving as many as it has whole tokens, and
-- debits the keys (see the top of this file). Locks the jobs it returns
-- (FOR UPDATE); the caller starts them in the same statement. Keys are
-- taken in ready_at order, so a key that waited longest goes first.
--
-- The key's waiting jobs are looked for from its frontier on, the (priority,
-- id) of the last job a claim took: the index entries before it are those
-- of jobs taken before, which stay until vacuum removes them (and while a
-- transaction held open elsewhere keeps it from doing so), and a scan from
-- the key's start would step over all of them every time. A job that comes
-- to wait before the frontier (a retry, a better priority) moves it back
-- (rate_arm, or maintenance's check_rates for one that left a check), so
-- none waits behind it unseen. A job the look passes over, locked by
-- someone else or of a kind the claim does not handle, holds the frontier
-- back: the next look starts at it. So a claim that comes up short of its
-- tokens (a key whose jobs come slower than its rate) reads the entries
-- from the frontier on, not those of every job taken before, and knows
-- that no job is left waiting without reading them either.
--
-- A key's next ready_at: now, if the claim's room ran out before its
-- tokens; when its next token is due, if its tokens ran out first; NULL if
-- no job of it waits any more. Jobs it could not take although it had
-- tokens (of kinds not in p_kinds, or locked by someone else) make it ready
-- again only when its next token would be due, so that a worker without
-- their handler does not claim in a loop.
CREATE OR REPLACE FUNCTION pgtask.pick_rated(p_queue text, p_room integer, p_kinds text[]) RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    k pgtask.rate_keys;
    now_ts timestamptz := clock_timestamp();
    kt timestamptz;
    have double precision;
    want integer;
    got bigint[];
    prios smallint[];
    skip_p smallint;
    skip_i bigint;
    last_p smallint;
    last_i bigint;
    picked bigint[] := '{}';
    seen bigint[] := '{}';
    next_at timestamptz;
BEGIN
    -- One key at a time: a loop over the query would fetch, and so lock,
    -- several keys' rows ahead, which the claims beside this one would
    -- then skip until it commits, whether it takes from them or not.
    WHILE cardinality(picked) < p_room LOOP
        SELECT * INTO k FROM pgtask.rate_keys
         WHERE queue = p_queue AND ready_at IS NOT NULL AND ready_at <= now_ts AND id <> ALL (seen)
         ORDER BY ready_at
         LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        seen := seen || k.id;
        -- Never before the key's last refill (a claim that committed after
        -- this one began): its tokens are refilled from then on only.
        kt := greatest(now_ts, k.refilled_at);
        have := pgtask.rate_tokens(k, kt);
        want := least(floor(have)::integer, p_room - cardinality(picked));
        got := '{}';
        prios := '{}';
        IF want > 0 AND k.frontier_id IS NOT NULL THEN
            SELECT coalesce(array_agg(w.id ORDER BY w.priority, w.id), '{}'), coalesce(array_agg(w.priority ORDER BY w.priority, w.id), '{}')
              INTO got, prios FROM (
                SELECT id, priority FROM pgtask.jobs
                 WHERE rate_id = k.id AND status = 'queued'
                   AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                   AND (priority, id) > (k.frontier_priority, k.frontier_id)
                 ORDER BY priority, id
                 LIMIT want
                   FOR UPDATE SKIP LOCKED) w;
        ELSIF want > 0 THEN
            SELECT coalesce(array_agg(w.id ORDER BY w.priority, w.id), '{}'), coalesce(array_agg(w.priority ORDER BY w.priority, w.id), '{}')
              INTO got, prios FROM (
                SELECT id, priority FROM pgtask.jobs
                 WHERE rate_id = k.id AND status = 'queued'
                   AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                 ORDER BY priority, id
                 LIMIT want
                   FOR UPDATE SKIP LOCKED) w;
        END IF;
        IF want > 0 THEN
            -- The first job the look passed over (locked by someone else,
            -- or of a kind the claim does not handle): before the last job
            -- it took, or anywhere after the frontier when it came up
            -- short. Read, not locked; what it reads is what the look read.
            last_p := NULL;
            last_i := NULL;
            IF cardinality(got) > 0 THEN
                SELECT u.p, u.i INTO last_p, last_i FROM unnest(prios, got) AS u(p, i) ORDER BY u.p DESC, u.i DESC LIMIT 1;
            END IF;
            skip_p := NULL;
            skip_i := NULL;
            IF k.frontier_id IS NOT NULL THEN
                SELECT j.priority, j.id INTO skip_p, skip_i FROM pgtask.jobs j
                 WHERE j.rate_id = k.id AND j.status = 'queued' AND j.id <> ALL (got)
                   AND (j.priority, j.id) > (k.frontier_priority, k.frontier_id)
                   AND (cardinality(got) < want OR (j.priority, j.id) < (last_p, last_i))
                 ORDER BY j.priority, j.id LIMIT 1;
            ELSE
                SELECT j.priority, j.id INTO skip_p, skip_i FROM pgtask.jobs j
                 WHERE j.rate_id = k.id AND j.status = 'queued' AND j.id <> ALL (got)
                   AND (cardinality(got) < want OR (j.priority, j.id) < (last_p, last_i))
                 ORDER BY j.priority, j.id LIMIT 1;
            END IF;
            -- The next look starts at the first job passed over, else after
            -- the last one taken: no job waits before it unseen (see
            -- above), and the entries of the jobs taken before it are not
            -- read again.
            IF skip_i IS NOT NULL THEN
                k.frontier_priority := skip_p;
                k.frontier_id := skip_i - 1;
            ELSIF cardinality(got) > 0 THEN
                k.frontier_priority := last_p;
                k.frontier_id := last_i;
            END IF;
        END IF;
        have := have - cardinality(got);
        picked := picked || got;
        IF want > 0 AND cardinality(got) = want THEN
            -- Maybe more wait: ready now if it has tokens left, else at its
            -- next token. (One that has none waiting finds so then.)
            next_at := pgtask.rate_token_at(have, kt, k.rate, k.period_us);
        ELSIF want > 0 AND skip_i IS NULL THEN
            -- It took every job after the frontier, and none waits before
            -- it: one that came to wait there moved it back, or left a check.
            next_at := NULL;
        ELSIF want > 0 THEN
            next_at := pgtask.rate_token_at(least(have, 0), kt, k.rate, k.period_us);
        ELSE
            -- Not a whole token yet (its ready_at was rounded).
            next_at := pgtask.rate_token_at(have, kt, k.rate, k.period_us);
        END IF;
        UPDATE pgtask.rate_keys
           SET tokens = have, refilled_at = kt, ready_at = next_at,
               frontier_priority = k.frontier_priority, frontier_id = k.frontier_id
         WHERE id = k.id;
    END LOOP;
    RETURN picked;
END;
$$;

-- How long from now, in microseconds (0 if already), until the first
-- ready_at of queue p_queue's rate keys: when a worker finds work there
-- next without being woken. NULL when no job waits on a rate. A span, not
-- a time, so that the worker's clock need not agree with the server's.
CREATE OR REPLACE FUNCTION pgtask.rate_wait_us(p_queue text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT greatest(0, ceil(extract(epoch FROM min(ready_at) - clock_timestamp()) * 1e6))::bigint
      FROM pgtask.rate_keys WHERE queue = p_queue AND ready_at IS NOT NULL
$$;

-- Which of the queues p_queues have rate keys: their workers read
-- rate_wait_us with each claim.
CREATE OR REPLACE FUNCTION pgtask.rated_queues(p_queues text[]) RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT q FROM unnest(p_queues) q WHERE EXISTS (SELECT 1 FROM pgtask.rate_keys k WHERE k.queue = q)
$$;

-- Applies the keys' pending checks (pgtask.rate_checks), up to p_limit
-- keys, each under its row's lock taken with SKIP LOCKED (a key locked now
-- keeps its checks for a later round): a key with jobs waiting that is not
-- ready becomes ready and wakes its queue's workers, and its next claim
-- looks for them from the key's start. Returns how many keys it made ready.
CREATE OR REPLACE FUNCTION pgtask.check_rates(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    k pgtask.rate_keys;
    now_ts timestamptz := clock_timestamp();
    made integer := 0;
BEGIN
    FOR c IN
        SELECT DISTINCT key_id FROM pgtask.rate_checks ORDER BY key_id LIMIT p_limit
    LOOP
        SELECT * INTO k FROM pgtask.rate_keys WHERE id = c.key_id FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM pgtask.rate_keys WHERE id = c.key_id) THEN
                DELETE FROM pgtask.rate_checks WHERE key_id = c.key_id;
            END IF;
            CONTINUE;
        END IF;
        DELETE FROM pgtask.rate_checks WHERE key_id = c.key_id;
        -- The job that left the check may wait before the frontier.
        IF k.ready_at IS NULL AND EXISTS (SELECT 1 FROM pgtask.jobs WHERE rate_id = k.id AND status = 'queued') THEN
            UPDATE pgtask.rate_keys
               SET ready_at = pgtask.rate_token_at(pgtask.rate_tokens(k, now_ts), now_ts, k.rate, k.period_us),
                   frontier_priority = NULL, frontier_id = NULL
             WHERE id = k.id;
            PERFORM pg_notify('pgtask', k.queue);
            made := made + 1;
        ELSIF k.frontier_id IS NOT NULL THEN
            UPDATE pgtask.rate_keys SET frontier_priority = NULL, frontier_id = NULL WHERE id = k.id;
        END IF;
    END LOOP;
    RETURN made;
END;
$$;

-- Sets (p_rate per p_period_us, with bursts of p_burst) or clears (p_rate
-- NULL) an operator's rate for key p_key of queue p_queue, and applies it
-- to the key's row at once, if there is one: its tokens are refilled at the
-- old rate up to now and kept (up to the new burst), and its next token is
-- due by the new rate. Returns how many keys' rows it changed (0 or 1).
CREATE OR REPLACE FUNCTION pgtask.set_rate(p_queue text, p_key text, p_rate integer, p_period_us bigint, p_burst integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    k pgtask.rate_keys;
    f record;
    now_ts timestamptz := clock_timestamp();
    have double precision;
BEGIN
    PERFORM pgtask.require_read_committed('setting a rate');
    IF p_rate IS NOT NULL AND (p_rate < 1 OR p_period_us IS NULL OR p_period_us < 1000
                               OR (p_burst IS NOT NULL AND p_burst < 1)) THEN
        RAISE EXCEPTION 'pgtask.set_rate: a rate needs at least 1 job per period of at least 1ms, and a burst of at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rate IS NULL THEN
        DELETE FROM pgtask.rate_overrides WHERE queue = p_queue AND rate_key = p_key;
    ELSE
        INSERT INTO pgtask.rate_overrides AS o (queue, rate_key, rate, period_us, burst)
        VALUES (p_queue, p_key, p_rate, p_period_us, coalesce(p_burst, pgtask.default_rate_burst(p_rate)))
        ON CONFLICT (queue, rate_key)
        DO UPDATE SET rate = excluded.rate, period_us = excluded.period_us, burst = excluded.burst, set_at = now();
    END IF;
    SELECT * INTO k FROM pgtask.rate_keys WHERE queue = p_queue AND rate_key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The row may have waited for a claim that refilled it after this
    -- began: never refill it again for time it was refilled for.
    now_ts := greatest(clock_timestamp(), k.refilled_at);
    f := pgtask.rate_in_force(p_queue, p_key, k.declared_rate, k.declared_period_us, k.declared_burst);
    IF (f.rate, f.period_us, f.burst) = (k.rate, k.period_us, k.burst) THEN
        RETURN 0;
    END IF;
    have := least(pgtask.rate_tokens(k, now_ts), f.burst);
    UPDATE pgtask.rate_keys
       SET rate = f.rate, period_us = f.period_us, burst = f.burst, tokens = have, refilled_at = now_ts,
           ready_at = CASE WHEN ready_at IS NOT NULL THEN pgtask.rate_token_at(have, now_ts, f.rate, f.period_us) END
     WHERE id = k.id;
    PERFORM pg_notify('pgtask', p_queue);
    RETURN 1;
END;
$$;

-- The burst a rate of p_rate per period gets unless one is declared: a
-- tenth of a period's starts, at least 1.
CREATE OR REPLACE FUNCTION pgtask.default_rate_burst(p_rate integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT greatest(1, p_rate / 10)
$$;

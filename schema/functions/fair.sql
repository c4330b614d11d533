-- revision: 4
-- Fair queues: within a queue, tenants take turns, so that one tenant's
-- flood cannot push another's jobs behind it.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.
--
-- Start-time fair queuing with a virtual clock. A queue is fair once it has
-- a row in pgtask.fair_queues: an enqueue that names a tenant (a task
-- declared fair, or runtime.WithTenant) creates it, and from then on every
-- job enqueued into the queue gets a tenant ('' when its enqueue named
-- none) and a turn, fair_seq. A tenant's jobs take turns one after another,
-- a turn apart (1,000,000 / the tenant's weight); a tenant's first job, and
-- the first after its queued jobs ran out, takes the turn the queue's
-- claims are at now: the turn of the queue's first runnable head, or, with
-- none, the queue's clock, which maintenance moves on. So a tenant that
-- comes while another has a backlog of 100,000 jobs gets turns next to the
-- ones being claimed, and its jobs interleave with the backlog at once,
-- while a tenant alone gets the whole queue (work-conserving).
--
-- Claims of a fair queue take heads by (priority, fair_seq, id) through an
-- index of their own (jobs_fair): one index range from its start, which
-- never reads a tenant's backlog beyond the jobs it claims. A grouped job
-- keeps the turn it got when enqueued, and runs at it once it is its
-- group's head: its group's order is id order, as everywhere. A job that
-- retries keeps its turn too: it comes back at its place.
--
-- No row is written per tenant: an enqueue reads its tenant's last queued
-- turn from jobs_fair_tenant (one index probe per tenant and statement) and
-- the tenant's weight. Enqueues never wait for each other, whatever their
-- tenants; two enqueues of one tenant in flight at once read the same last
-- turn and share turns until they commit, so a tenant enqueueing from k
-- transactions at once gets up to k turns for another's one while they
-- overlap.

-- The turns of a batch's jobs. p_settings names each job's settings, and
-- p_queues is each set of settings' queue (see enqueue_jobs); p_fair names
-- each job's tenant by its 1-based place in p_fair_queues and
-- p_fair_tenants (0: none named), or is NULL for a batch without any. A
-- job that names a tenant makes its queue fair. Returns, per job, its
-- tenant and its turn: NULL for a job of a queue that is not fair, '' for
-- a job of a fair queue that named none; both NULL (not arrays) when no
-- job is in a fair queue, which costs one look at pgtask.fair_queues.
-- Turns of one tenant follow the batch's order.
CREATE OR REPLACE FUNCTION pgtask.fair_turns(p_settings integer[], p_queues text[], p_fair integer[], p_fair_queues text[],
                                             p_fair_tenants text[], OUT tenants text[], OUT seqs bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    fair text[];
BEGIN
    IF p_fair IS NOT NULL THEN
        IF cardinality(p_fair) <> cardinality(p_settings)
           OR coalesce(cardinality(p_fair_queues), 0) <> coalesce(cardinality(p_fair_tenants), 0)
           OR NOT (pgtask.is_list(p_fair_queues) AND pgtask.is_list(p_fair_tenants)) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: the tenant arrays differ in length';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(p_fair, p_settings) AS u(f, o)
                    LEFT JOIN unnest(p_fair_queues, p_fair_tenants) WITH ORDINALITY AS t(q, tenant, f) ON t.f = u.f
                    WHERE u.f IS NULL OR u.f < 0 OR u.f > cardinality(p_fair_queues)
                       OR (u.f > 0 AND (t.q IS DISTINCT FROM p_queues[u.o] OR t.tenant IS NULL))) THEN
            RAISE EXCEPTION 'pgtask.enqueue_jobs: a job names no listed tenant of its queue';
        END IF;
        -- Makes the queues fair. The first enqueues of a queue's tenants
        -- must not wait for each other: an insert into fair_queues would
        -- wait for another transaction's uncommitted row of the queue (and
        -- two transactions making two queues fair in opposite orders would
        -- deadlock). So an enqueue inserts the row only under (the unique
        -- lock class, hash of 'fair:' and the queue), taken without
        -- waiting, which every insert of a row holds until it commits; one
        -- that finds it taken leaves the row to its holder. Its own jobs
        -- get their turns all the same (below); should the holder roll
        -- back, the queue becomes fair at its next enqueue that names a
        -- tenant.
        INSERT INTO pgtask.fair_queues (queue)
        SELECT d.q FROM (SELECT DISTINCT q FROM unnest(p_fair_queues) q ORDER BY q) d
         -- (CASE: the lock only for a queue without its row.)
         WHERE CASE WHEN EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = d.q) THEN false
                    ELSE pg_try_advisory_xact_lock(pgtask.unique_lock_class(), hashtext('fair:' || d.q)) END
        ON CONFLICT (queue) DO NOTHING;
    END IF;
    -- The fair queues among the batch's: those with a row, and those that
    -- a job of the batch names a tenant of.
    SELECT array_agg(DISTINCT u.q) INTO fair
      FROM (SELECT f.queue AS q FROM pgtask.fair_queues f WHERE f.queue = ANY (p_queues)
            UNION ALL
            SELECT q FROM unnest(p_fair_queues) q WHERE p_fair IS NOT NULL) u;
    IF fair IS NULL THEN
        RETURN;
    END IF;
    -- Arrays of text are read by zipping them, not by subscript (which
    -- walks them from their start), but for p_queues, one per settings.
    WITH job AS (
        SELECT u.i, p_queues[u.o] AS q,
               CASE WHEN p_queues[u.o] = ANY (fair) THEN coalesce(t.tenant, '') END AS tenant
          FROM unnest(p_settings, coalesce(p_fair, array_fill(0, ARRAY[cardinality(p_settings)])))
               WITH ORDINALITY AS u(o, f, i)
          LEFT JOIN unnest(p_fair_tenants) WITH ORDINALITY AS t(tenant, f) ON t.f = u.f
    ), tenant AS (
        SELECT d.q, d.tenant, s.step,
               greatest((SELECT max(j.fair_seq) FROM pgtask.jobs j
                          WHERE j.queue = d.q AND j.tenant = d.tenant AND j.status = 'queued'
                            AND j.fair_seq IS NOT NULL) + s.step,
                        pgtask.fair_clock(d.q)) AS first
          FROM (SELECT DISTINCT job.q, job.tenant FROM job WHERE job.tenant IS NOT NULL) d
          CROSS JOIN LATERAL (
              SELECT 1000000 / coalesce((SELECT w.weight FROM pgtask.fair_weights w
                                          WHERE w.queue = d.q AND w.tenant = d.tenant), 1) AS step) s
    )
    SELECT array_agg(r.tenant ORDER BY r.i), array_agg(r.seq ORDER BY r.i)
      INTO tenants, seqs
      FROM (SELECT job.i, job.tenant,
                   t.first + (row_number() OVER (PARTITION BY job.q, job.tenant ORDER BY job.i) - 1) * t.step AS seq
              FROM job LEFT JOIN tenant t ON t.q = job.q AND t.tenant = job.tenant) r;
END;
$$;

-- The turn a fair queue's claims are at now: that of its first runnable
-- head (one index probe), or the queue's clock when it has none or the
-- clock is further on (maintenance moves the clock to the first head's
-- turn, so that a queue whose heads all ran keeps its place).
CREATE OR REPLACE FUNCTION pgtask.fair_clock(p_queue text) RETURNS bigint
LANGUAGE sql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
    SELECT greatest(
        (SELECT f.clock FROM pgtask.fair_queues f WHERE f.queue = p_queue),
        (SELECT j.fair_seq FROM pgtask.jobs j
          WHERE j.queue = p_queue AND j.status = 'queued' AND j.is_head AND j.fair_seq IS NOT NULL
          ORDER BY j.priority, j.fair_seq, j.id
          LIMIT 1),
        0)
$$;

-- Moves each fair queue's clock on to the turn its claims are at. A queue
-- whose row another round holds is left for the next round. Returns how
-- many clocks moved.
CREATE OR REPLACE FUNCTION pgtask.advance_fair_clocks() RETURNS integer
LANGUAGE sql AS $$
    WITH due AS (
        SELECT f.queue FROM pgtask.fair_queues f ORDER BY f.queue FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE pgtask.fair_queues f SET clock = pgtask.fair_clock(f.queue)
          FROM due
         WHERE f.queue = due.queue AND pgtask.fair_clock(f.queue) > f.clock
        RETURNING 1
    )
    SELECT count(*)::integer FROM moved;
$$;

-- Picks and locks (FOR UPDATE SKIP LOCKED) up to p_max runnable heads of a
-- fair queue by (priority, turn, id); see pick_heads, which calls it. Heads
-- this transaction just promoted get no precedence here: their turns place
-- them. Jobs without a turn (enqueued before the queue became fair) come
-- after every job with one, by (priority, id), when the claim has room
-- left: that look reads the queue's claim index (jobs_claim) from its
-- start, where the heads with a turn that the claim did not take are
-- locked by other claims, but also, as the first look does in jobs_fair,
-- over the dead entries of the jobs claimed since the last vacuum. A claim
-- that comes up short, as a claim of a queue with idle runners does, pays
-- both.
CREATE OR REPLACE FUNCTION pgtask.pick_fair_heads(p_queue text, p_max integer, p_kinds text[])
RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    picked bigint[];
    more bigint[];
BEGIN
    PERFORM set_config('pgtask.promoted', '', true);
    SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.fair_seq, c.id), '{}') INTO picked FROM (
        SELECT id, priority, fair_seq FROM pgtask.jobs
         WHERE queue = p_queue AND status = 'queued' AND is_head AND fair_seq IS NOT NULL
           AND (p_kinds IS NULL OR kind = ANY (p_kinds))
         ORDER BY priority, fair_seq, id
         LIMIT p_max
           FOR UPDATE SKIP LOCKED) c;
    IF cardinality(picked) < p_max THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.id), '{}') INTO more FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head AND fair_seq IS NULL
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        picked := picked || more;
    END IF;
    RETURN picked;
END;
$$;

-- Makes p_queue fair (p_fair) or not. A queue made fair gives turns to the
-- jobs enqueued from then on; one that stops being fair is claimed by
-- (priority, id) again, its jobs' turns kept but unused. Returns whether
-- anything changed.
CREATE OR REPLACE FUNCTION pgtask.set_fair_queue(p_queue text, p_fair boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    IF p_fair THEN
        -- Under the lock an enqueue takes to insert the row (see
        -- fair_turns): an enqueue never waits for this one.
        PERFORM pg_advisory_xact_lock(pgtask.unique_lock_class(), hashtext('fair:' || p_queue));
        INSERT INTO pgtask.fair_queues (queue, clock) VALUES (p_queue, 0) ON CONFLICT (queue) DO NOTHING;
    ELSE
        DELETE FROM pgtask.fair_queues WHERE queue = p_queue;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n > 0;
END;
$$;

-- Sets the weight of a tenant of a fair queue: it gets p_weight turns for
-- a tenant of weight 1's one. 0 or 1 sets it back to the default, 1. The
-- weight applies to the tenant's jobs enqueued from then on. Returns the
-- weight it had.
CREATE OR REPLACE FUNCTION pgtask.set_tenant_weight(p_queue text, p_tenant text, p_weight integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    old integer;
BEGIN
    IF p_weight IS NULL OR p_weight < 0 OR p_weight > 1000 THEN
        RAISE EXCEPTION 'pgtask.set_tenant_weight: weight % is not between 0 (the default) and 1000', p_weight
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT w.weight INTO old FROM pgtask.fair_weights w WHERE w.queue = p_queue AND w.tenant = p_tenant;
    IF p_weight <= 1 THEN
        DELETE FROM pgtask.fair_weights w WHERE w.queue = p_queue AND w.tenant = p_tenant;
    ELSE
        INSERT INTO pgtask.fair_weights (queue, tenant, weight) VALUES (p_queue, p_tenant, p_weight)
        ON CONFLICT (queue, tenant) DO UPDATE SET weight = excluded.weight, set_at = now();
    END IF;
    RETURN coalesce(old, 1);
END;
$$;

-- The tenants of fair queues (p_queue, or every fair queue when NULL): each
-- tenant's weight and queued jobs, the p_top tenants with the most queued
-- jobs of each queue, and tenants with a weight set even when they have
-- none queued. Counting reads each tenant's queued jobs in jobs_fair_tenant.
CREATE OR REPLACE FUNCTION pgtask.fair_tenants(p_queue text, p_top integer)
RETURNS TABLE (queue text, tenant text, weight integer, queued bigint, next_turn bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.queue, r.tenant, r.weight, r.queued, r.next_turn FROM (
        SELECT c.queue, c.tenant, coalesce(w.weight, 1) AS weight, coalesce(c.queued, 0) AS queued, c.next_turn,
               row_number() OVER (PARTITION BY c.queue ORDER BY coalesce(c.queued, 0) DESC, c.tenant) AS rn
          FROM (SELECT j.queue, j.tenant, count(*) AS queued, min(j.fair_seq) AS next_turn
                  FROM pgtask.jobs j
                  JOIN pgtask.fair_queues f ON f.queue = j.queue
                 WHERE j.status = 'queued' AND j.fair_seq IS NOT NULL AND (p_queue IS NULL OR j.queue = p_queue)
                 GROUP BY j.queue, j.tenant
                UNION ALL
                SELECT w.queue, w.tenant, NULL, NULL
                  FROM pgtask.fair_weights w
                 WHERE (p_queue IS NULL OR w.queue = p_queue)
                   AND NOT EXISTS (SELECT 1 FROM pgtask.jobs j
                                    WHERE j.queue = w.queue AND j.tenant = w.tenant AND j.status = 'queued'
                                      AND j.fair_seq IS NOT NULL)) c
          LEFT JOIN pgtask.fair_weights w ON w.queue = c.queue AND w.tenant = c.tenant) r
     WHERE r.rn <= p_top
     ORDER BY r.queue, r.queued DESC, r.tenant;
$$;

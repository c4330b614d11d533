-- revision: 66
-- Working jobs: claiming a batch, holding it in the job transaction, and
-- recording each attempt's outcome.
--
-- A job's life: scheduled (waiting for run_after) -> queued (runnable) ->
-- started (claimed; attempts already counted and committed) -> succeeded,
-- or back to scheduled/queued for a retry, or failed; cancelled by an operator.
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change. A function whose
-- arguments or result changed is dropped first, by its argument list,
-- so that no other signature of it survives a re-apply (CREATE OR REPLACE
-- cannot change a result, and a new argument list would leave the old one
-- beside it).
--
-- The claims run with plan_cache_mode = force_generic_plan. Their statements
-- take the queue, the cursor and the promoted heads as parameters, and the
-- planner otherwise judges a custom plan for each call cheaper than the
-- generic one, so it planned the claim's UPDATE and its four scans afresh on
-- every call: more time than running them. Every one of their statements
-- names its partial index by constants (status, is_head), so the generic
-- plan can read the same indexes a custom one would. The scan of the part
-- before the cursor at the cursor's priority is written as a range of
-- (priority, id): as priority = p_after_priority AND id <= p_after_id, the
-- primary key's order served its ORDER BY too, and the generic plan chose
-- to scan the primary key from the table's first job, finished ones
-- included, instead of the claim index.
--
-- Statements that find jobs by their ids and test that they are started do
-- so as text: status::text = 'started'. Compared as the enum, the test matches
-- the partial index of started jobs (jobs_claim_token), which the planner,
-- from statistics taken when few jobs ran, thinks holds a row or two. It
-- then joined a list of ids against every started job (250 ids against
-- 1,000 started jobs of four runners: 93 ms a batch), and looked a single id
-- up by scanning that index whole, instead of using the primary key.
-- Compared as text, only the primary key serves.
--
-- The heads a claim takes first because its own transaction just promoted
-- them (pgtask.promoted) are looked up the same way. Compared as the enum,
-- the lookup's generic plan scanned the queue's part of the claim index
-- (jobs_claim) and filtered it by id. The entries of every head claimed
-- before are in that part, dead; with the vacuum horizon pinned by some
-- other session's open transaction, nothing removes them, so a busy group
-- claimed slower with every job it ran.

DROP FUNCTION IF EXISTS pgtask.cancel_claimed(bigint[], integer[], bigint[]);
DROP FUNCTION IF EXISTS pgtask.claim_jobs(text, integer, integer, smallint, bigint, bigint, boolean, bigint, text[]);
DROP FUNCTION IF EXISTS pgtask.start_held(bigint[], integer, bigint, bigint[], bigint[], smallint, bigint, boolean, bigint[]);
DROP FUNCTION IF EXISTS pgtask.claim_leased_jobs(text, integer, integer, bigint, smallint, bigint, bigint, boolean, bigint,
                                                 integer, text[]);

-- Whether a claimed head (p_id, p_priority) came from a claim's scans in
-- index order, of a better priority than the cursor (p_after_priority,
-- p_after_id) or after it, rather than from the heads its own transaction
-- promoted (p_promoted) or from the look behind the cursor: only those move
-- the worker's cursor (see pick_heads). A head promoted further on than the
-- cursor would otherwise move it past heads nobody has claimed, unless the
-- claim's scans came up short of heads (p_exhausted): then they found every
-- head ahead of the cursor that nobody else had locked, and a promoted one
-- moves the cursor as a scanned one does. A busy group's heads are all
-- promoted by the worker that ran the job before: a cursor left behind them
-- would make every scan ahead of it step over the dead entries of all the
-- heads claimed since, while a transaction held open elsewhere keeps them.
CREATE OR REPLACE FUNCTION pgtask.scanned(p_id bigint, p_priority smallint, p_promoted bigint[],
                                          p_after_priority smallint, p_after_id bigint, p_exhausted boolean)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT (p_exhausted OR p_id <> ALL (coalesce(p_promoted, '{}')))
       AND (p_after_priority IS NULL OR p_priority < p_after_priority
            OR (p_priority, p_id) > (p_after_priority, p_after_id))
$$;

-- Picks and locks (FOR UPDATE SKIP LOCKED) up to p_max runnable heads of a
-- queue, by priority then id. A worker passes the (priority, id) of the last
-- head its scans found as a cursor, and the scan starts there: the claim
-- index's entries of the heads claimed before it are dead, but while some
-- other session keeps a transaction open (pinning the vacuum horizon),
-- nothing can remove them, and a scan from the start would step over every
-- one, every time. Heads of a better priority than the cursor's are looked
-- for first; the part before the cursor at its priority only when the rest
-- does not fill the claim, and then from p_floor_id on (NULL: from the
-- start), unless p_behind_first: then right after the better priorities,
-- before the part after the cursor. The worker asks for that when heads
-- were announced behind its cursor, or a look from the start is due (see
-- below): while better heads keep coming after the cursor, a claim would
-- otherwise fill up there every time and leave those heads waiting. Heads come to lie behind a cursor when their enqueue commits after
-- a later one's claim, or when they are promoted, retried or handed back;
-- the worker passes as the floor the cursor of its last claim that came up
-- short (having looked back to its own floor), so a claim steps over the
-- dead entries of the claims since then, not of every claim since the
-- horizon was pinned. Heads that come to lie behind are announced: an
-- enqueue's notification on the pgtask channel, and those on the
-- pgtask_behind channel (promotions, retries, hand-backs, a queue resumed),
-- carry the first such head's id before the queue ("id:queue"), and the
-- worker moves its floor back to it; one that names the queue alone, or an
-- enqueue that did not notify, has it look back from the start, as it does
-- every 5 seconds for anything else. Without a cursor (NULL) the scan
-- starts at the beginning.
--
-- p_kinds, unless NULL, are the kinds the worker has handlers for: heads of
-- other kinds are left to workers that have theirs (a rolling deploy that
-- adds a kind), with no attempt spent. The scans step over such heads, so
-- they cost a claim only while they are runnable and unhandled by it; with
-- every kind handled, which is the usual case, the test costs nothing more
-- than a comparison on rows the claim reads anyway. Filtering on the claim
-- index itself (kind in its key) would lose its (priority, id) order across
-- kinds.
CREATE OR REPLACE FUNCTION pgtask.pick_heads(p_queue text, p_max integer, p_after_priority smallint, p_after_id bigint,
                                             p_floor_id bigint, p_behind_first boolean, p_kinds text[])
RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    picked bigint[] := '{}';
    promoted bigint[];
    more bigint[];
BEGIN
    -- A fair queue's tenants take turns (see functions/fair.sql).
    IF EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        RETURN pgtask.pick_fair_heads(p_queue, p_max, p_kinds);
    END IF;
    -- Heads this transaction's worker just made runnable by finishing their
    -- group's previous job (advance_one_group): taken first, by id, and
    -- wherever they are in the index.
    promoted := string_to_array(nullif(current_setting('pgtask.promoted', true), ''), ',')::bigint[];
    IF promoted IS NOT NULL THEN
        PERFORM set_config('pgtask.promoted', '', true);
        SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.id), '{}') INTO picked FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE id = ANY (promoted) AND queue = p_queue AND status::text = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
             ORDER BY priority, id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED) c;
        IF EXISTS (SELECT 1 FROM unnest(promoted) u WHERE u <> ALL (picked)) THEN
            -- No room for all of them: someone else may take the rest,
            -- looking behind its cursor from the first of them.
            PERFORM pg_notify('pgtask_behind',
                              (SELECT min(u) FROM unnest(promoted) u WHERE u <> ALL (picked)) || ':' || p_queue);
        END IF;
    END IF;
    IF cardinality(picked) < p_max AND p_after_priority IS NULL THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.id), '{}') INTO more FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds)) AND id <> ALL (picked)
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        RETURN picked || more;
    END IF;
    IF cardinality(picked) < p_max THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.id), '{}') INTO more FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds)) AND priority < p_after_priority
               AND id <> ALL (picked)
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        picked := picked || more;
    END IF;
    IF cardinality(picked) < p_max AND p_behind_first THEN
        -- Heads were announced behind the cursor (or a look from the start
        -- is due): they come before the rest in (priority, id) order, and a
        -- claim that fills up ahead of the cursor would never reach them
        -- while better heads keep coming.
        SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO more FROM (
            SELECT id FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
               AND (priority, id) >= (p_after_priority, coalesce(p_floor_id, -9223372036854775808))
               AND (priority, id) <= (p_after_priority, p_after_id) AND id <> ALL (picked)
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        picked := picked || more;
    END IF;
    IF cardinality(picked) < p_max THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.priority, c.id), '{}') INTO more FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
               AND (priority, id) > (p_after_priority, p_after_id) AND id <> ALL (picked)
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        picked := picked || more;
    END IF;
    IF cardinality(picked) < p_max AND NOT p_behind_first THEN
        SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO more FROM (
            SELECT id FROM pgtask.jobs
             WHERE queue = p_queue AND status = 'queued' AND is_head
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
               AND (priority, id) >= (p_after_priority, coalesce(p_floor_id, -9223372036854775808))
               AND (priority, id) <= (p_after_priority, p_after_id) AND id <> ALL (picked)
             ORDER BY priority, id
             LIMIT p_max - cardinality(picked)
               FOR UPDATE SKIP LOCKED) c;
        picked := picked || more;
    END IF;
    RETURN picked;
END;
$$;

-- The jobs that follow the grouped heads p_heads (just picked, locked) in
-- their groups, up to p_room of them and p_per_head behind any one head, to
-- fill a claim: a follower is taken only in an unbroken run right behind its
-- head, the next unfinished jobs of the group in id order, each queued and
-- not locked by anyone (a started one, left by a lost session or a worker's
-- run, ends the run). Locks what it returns (FOR UPDATE). The worker runs a
-- group's run in order and stops it at the first job that does not let the
-- group move on, handing the rest back; so a run keeps the group's order and
-- one-at-a-time rule. A job of a kind not in p_kinds (unless NULL) ends the
-- run too: the worker has no handler for it.
CREATE OR REPLACE FUNCTION pgtask.pick_runs(p_heads bigint[], p_room integer, p_per_head integer, p_kinds text[])
RETURNS bigint[]
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    picked bigint[] := '{}';
    room integer := p_room;
    h record;
    expected bigint[];
    got bigint[];
    n integer;
BEGIN
    FOR h IN
        SELECT id, group_id, queue, group_key FROM pgtask.jobs
         WHERE id = ANY (p_heads) AND group_id IS NOT NULL
         ORDER BY priority, id
    LOOP
        EXIT WHEN room <= 0;
        -- From the head on, or from the group's pending_from when that is
        -- lower (see 0001_baseline.sql), read in the same snapshot: a scan
        -- from the group's start would step over the entries every job it
        -- ran left in the index, which stay while another session keeps a
        -- transaction open.
        SELECT array_agg(e.id ORDER BY e.id) INTO expected FROM (
            SELECT id FROM pgtask.jobs
             WHERE group_id = h.group_id
               AND pgtask.job_pending(status) AND id <> h.id
               AND id >= least(h.id, (SELECT g.pending_from FROM pgtask.queue_groups g
                                        WHERE g.queue = h.queue AND g.group_key = h.group_key))
             ORDER BY id
             LIMIT least(room, p_per_head)) e;
        CONTINUE WHEN expected IS NULL OR expected[1] < h.id;
        SELECT array_agg(r.id ORDER BY r.id) INTO got FROM (
            SELECT id FROM pgtask.jobs
             WHERE id = ANY (expected) AND status = 'queued'
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
             ORDER BY id
               FOR UPDATE SKIP LOCKED) r;
        n := 0;
        WHILE n < coalesce(cardinality(got), 0) AND got[n + 1] = expected[n + 1] LOOP
            n := n + 1;
        END LOOP;
        IF n > 0 THEN
            picked := picked || got[1:n];
            room := room - n;
        END IF;
    END LOOP;
    RETURN picked;
END;
$$;

-- For a held-mode claim: of the limited heads among p_heads (admitted jobs,
-- see functions/limits.sql), the ones beyond the first of each key
-- (dropped: the claim leaves them to other runners, and announces them, so
-- that a key's slots spread over runners), and, behind each first one, up to
-- p_per_head of its key's waiting jobs in (priority, id) order from it on,
-- p_room in all (followers, locked). A runner runs its batch one job at a time, so a
-- head's run uses its one slot: the followers stay unadmitted, and when the
-- head ends, its slot passes to the run's next job (see release_slot). The
-- scan starts at the head: the index entries before it are mostly those of
-- jobs admitted earlier, which a transaction held open elsewhere keeps.
-- Heads of the keys p_taken_keys, whose runs the claim took already (see
-- pick_admitted), are dropped too.
CREATE OR REPLACE FUNCTION pgtask.pick_limited_runs(p_heads bigint[], p_room integer, p_per_head integer, p_kinds text[],
                                                    p_taken_keys bigint[],
                                                    OUT dropped bigint[], OUT followers bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    h record;
    room integer := p_room;
    got bigint[];
BEGIN
    dropped := '{}';
    followers := '{}';
    FOR h IN
        SELECT j.id, j.limit_id, j.priority,
               row_number() OVER (PARTITION BY j.limit_id ORDER BY j.priority, j.id) AS nth
          FROM pgtask.jobs j
         WHERE j.id = ANY (p_heads) AND j.limit_id IS NOT NULL
         ORDER BY j.priority, j.id
    LOOP
        IF h.nth > 1 OR h.limit_id = ANY (p_taken_keys) THEN
            dropped := dropped || h.id;
            CONTINUE;
        END IF;
        CONTINUE WHEN room <= 0;
        SELECT coalesce(array_agg(f.id ORDER BY f.priority, f.id), '{}') INTO got FROM (
            SELECT id, priority FROM pgtask.jobs
             WHERE limit_id = h.limit_id AND status = 'queued' AND NOT is_head
               AND (priority, id) > (h.priority, h.id)
               AND (p_kinds IS NULL OR kind = ANY (p_kinds))
             ORDER BY priority, id
             LIMIT least(room, p_per_head)
               FOR UPDATE SKIP LOCKED) f;
        followers := followers || got;
        room := room - cardinality(got);
    END LOOP;
END;
$$;

-- Claims up to p_max jobs of a queue and returns what a worker needs to run
-- them (not their error history, which can be large): runnable heads (see
-- pick_heads for the cursor p_after_priority, p_after_id), and, to fill the
-- batch, the runs of jobs that follow grouped heads in their groups (see
-- pick_runs): one commit covers many jobs of a group; and the runs of a
-- limit key's waiting jobs behind its admitted heads (see pick_limited_runs).
-- Every claimed
-- job gets its attempt counted, this session as owner, p_worker as the
-- process and p_token (see hold_claimed_jobs); the claim commits before any
-- handler runs. Rows come in priority, id order, each with the job's snooze
-- count (see fail_job): the worker knows which snooze fails the job. A paused queue (see
-- pause_queue) gives nothing. started_at is when the claim's statement
-- began: a claim stamped later than a pause's commit saw the pause.
-- p_kinds, unless NULL, limits the claim to the kinds the worker has
-- handlers for (see pick_heads).
CREATE OR REPLACE FUNCTION pgtask.claim_jobs(p_queue text, p_max integer, p_worker integer,
                                                p_after_priority smallint, p_after_id bigint, p_floor_id bigint,
                                                p_behind_first boolean, p_token bigint, p_kinds text[])
RETURNS TABLE (
    id bigint, queue text, kind text, group_key text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fail_blocks_group boolean, created_at timestamptz,
    run_after timestamptz, metadata jsonb, scanned boolean, snoozes integer, cancel_cause text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    picked bigint[];
    heads bigint[];
    promoted bigint[];
    exhausted boolean;
    dropped bigint[];
    followers bigint[];
    rated bigint[] := '{}';
    limited bigint[] := '{}';
    lruns bigint[] := '{}';
    lkeys bigint[] := '{}';
BEGIN
    PERFORM pgtask.require_read_committed('claiming jobs');
    PERFORM pg_advisory_xact_lock_shared(pgtask.pause_lock_class(), hashtext(p_queue));
    IF EXISTS (SELECT 1 FROM pgtask.paused_queues q WHERE q.queue = p_queue) THEN
        RETURN;
    END IF;
    -- Rate-limited jobs whose keys have tokens (see functions/rates.sql),
    -- first: their tokens come with time, and a claim that left them for
    -- heads would let them pile up. A queue with no key ready costs one
    -- probe of rate_keys_ready.
    IF EXISTS (SELECT 1 FROM pgtask.rate_keys k
                WHERE k.queue = p_queue AND k.ready_at IS NOT NULL AND k.ready_at <= clock_timestamp()) THEN
        rated := pgtask.pick_rated(p_queue, p_max, p_kinds);
        IF cardinality(rated) >= p_max THEN
            PERFORM pgtask.leave_promoted(p_queue);
            PERFORM pgtask.wake_for_ready_keys(p_queue);
            RETURN QUERY SELECT * FROM pgtask.start_held(rated, p_worker, p_token, '{}', NULL, p_after_priority, p_after_id, false, '{}');
            RETURN;
        END IF;
    END IF;
    -- Waiting jobs of limit keys with free slots (see functions/limits.sql),
    -- next, each key's with a run behind it. A queue with no ready key
    -- costs one probe of limit_keys_ready. (Not in a fair queue, whose
    -- slots are handed on to waiting jobs, which run at their turn.)
    IF EXISTS (SELECT 1 FROM pgtask.limit_keys k WHERE k.queue = p_queue AND k.waiting AND k.free > 0)
       AND NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        SELECT a.admitted, a.followers, a.keys INTO limited, lruns, lkeys
          FROM pgtask.pick_admitted(p_queue, p_max - cardinality(rated), p_max, p_kinds) a;
        PERFORM pgtask.wake_for_ready_keys(p_queue);
        IF cardinality(rated) + cardinality(limited) + cardinality(lruns) >= p_max THEN
            PERFORM pgtask.leave_promoted(p_queue);
            RETURN QUERY SELECT * FROM pgtask.start_held(rated || limited || lruns, p_worker, p_token, '{}', NULL,
                                                         p_after_priority, p_after_id, false, limited);
            RETURN;
        END IF;
        rated := rated || limited || lruns;
    ELSIF current_setting('pgtask.limit_wakes', true) <> '' THEN
        -- Only a transaction whose outcomes made a key ready has wakes
        -- left (see wake_for_limit): other claims skip the call.
        PERFORM pgtask.wake_for_ready_keys(p_queue);
    END IF;
    -- (Not for a fair queue, whose heads are taken by turn: see pick_heads.)
    IF p_max = 1 AND p_after_priority IS NOT NULL AND cardinality(rated) = 0
       AND NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        -- One job, so no run behind a head to fill: one statement, the
        -- scans of pick_heads in turn until one finds a head, starting
        -- with a head this transaction just promoted.
        promoted := string_to_array(nullif(current_setting('pgtask.promoted', true), ''), ',')::bigint[];
        IF promoted IS NOT NULL THEN
            PERFORM set_config('pgtask.promoted', '', true);
            IF cardinality(promoted) > 1 THEN
                -- Room for one only.
                PERFORM pg_notify('pgtask_behind', (SELECT min(u) FROM unnest(promoted) u) || ':' || p_queue);
            ELSIF p_kinds IS NOT NULL
                  AND EXISTS (SELECT 1 FROM pgtask.jobs WHERE id = promoted[1] AND kind <> ALL (p_kinds)) THEN
                PERFORM pg_notify('pgtask_behind', promoted[1] || ':' || p_queue); -- for a worker that handles it
            END IF;
        END IF;
        RETURN QUERY
          WITH claimed AS (
            UPDATE pgtask.jobs j
               SET status = 'started', attempts = j.attempts + 1,
                   started_at = statement_timestamp(), owner_pid = pg_backend_pid(), worker_id = p_worker,
                   claim_token = p_token, lease_until = NULL
             WHERE j.id = coalesce(
                   (SELECT id FROM pgtask.jobs
                     WHERE id = ANY (promoted) AND queue = p_queue AND status::text = 'queued' AND is_head
                       AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                     ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED),
                   (SELECT id FROM pgtask.jobs
                     WHERE queue = p_queue AND status = 'queued' AND is_head
                       AND (p_kinds IS NULL OR kind = ANY (p_kinds)) AND priority < p_after_priority
                     ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED),
                   (SELECT id FROM pgtask.jobs
                     WHERE p_behind_first AND queue = p_queue AND status = 'queued' AND is_head
                       AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                       AND (priority, id) >= (p_after_priority, coalesce(p_floor_id, -9223372036854775808))
                       AND (priority, id) <= (p_after_priority, p_after_id)
                     ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED),
                   (SELECT id FROM pgtask.jobs
                     WHERE queue = p_queue AND status = 'queued' AND is_head
                       AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                       AND (priority, id) > (p_after_priority, p_after_id)
                     ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED),
                   (SELECT id FROM pgtask.jobs
                     WHERE NOT p_behind_first AND queue = p_queue AND status = 'queued' AND is_head
                       AND (p_kinds IS NULL OR kind = ANY (p_kinds))
                       AND (priority, id) >= (p_after_priority, coalesce(p_floor_id, -9223372036854775808))
                       AND (priority, id) <= (p_after_priority, p_after_id)
                     ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED))
            RETURNING ROW(j.id, j.queue, j.kind, j.group_key, j.priority, j.payload,
                      j.attempts, j.max_attempts, j.fail_blocks_group, j.created_at,
                      j.run_after, j.metadata,
                      pgtask.scanned(j.id, j.priority, promoted, p_after_priority, p_after_id, false),
                      j.snoozes, j.workflow_id)::pgtask.claimed_job AS job
          )
          SELECT * FROM pgtask.cancel_claimed(ARRAY(SELECT c.job FROM claimed c));
        RETURN;
    END IF;
    promoted := string_to_array(nullif(current_setting('pgtask.promoted', true), ''), ',')::bigint[];
    heads := pgtask.pick_heads(p_queue, p_max - cardinality(rated), p_after_priority, p_after_id, p_floor_id, p_behind_first,
                               p_kinds);
    exhausted := cardinality(heads) < p_max - cardinality(rated);
    IF cardinality(heads) = 0 THEN
        RETURN QUERY SELECT * FROM pgtask.start_held(rated, p_worker, p_token, '{}', NULL, p_after_priority, p_after_id, false,
                                                     limited);
        RETURN;
    END IF;
    -- Limited heads (see functions/limits.sql): one per key, each with a
    -- run of its key's waiting jobs behind it, which this runner runs one
    -- after another on the one slot.
    -- A queue that never had a limit key has no limited heads to look for.
    IF EXISTS (SELECT 1 FROM pgtask.limit_keys k WHERE k.queue = p_queue) THEN
        SELECT r.dropped, r.followers INTO dropped, followers
          FROM pgtask.pick_limited_runs(heads, p_max - cardinality(rated) - cardinality(heads), p_max, p_kinds, lkeys) r;
    ELSE
        dropped := '{}';
        followers := '{}';
    END IF;
    IF cardinality(dropped) > 0 THEN
        heads := ARRAY(SELECT h FROM unnest(heads) h WHERE h <> ALL (dropped));
        -- They stay runnable, and may lie behind the cursor this claim
        -- moves past them, where no claim looks until a look back from the
        -- start is due: announced, from the first, as heads promoted
        -- behind a cursor are (see pick_heads).
        PERFORM pg_notify('pgtask_behind', (SELECT min(d) FROM unnest(dropped) d) || ':' || p_queue);
    END IF;
    picked := heads;
    IF cardinality(rated) + cardinality(picked) < p_max THEN
        picked := picked || pgtask.pick_runs(picked, p_max - cardinality(rated) - cardinality(picked), p_max, p_kinds);
    END IF;
    picked := rated || picked || followers[1 : greatest(p_max - cardinality(rated) - cardinality(picked), 0)];
    RETURN QUERY SELECT * FROM pgtask.start_held(picked, p_worker, p_token, heads, promoted, p_after_priority, p_after_id, exhausted,
                                                 limited);
END;
$$;

-- The jobs a claim just started (p_jobs), as the claim returns them, in
-- priority, id order, each with why its attempt must not run
-- (cancel_cause, as cancel_requests.cause says it; NULL: it runs). Every
-- claim ends here. An attempt must not run when an operator's cancel
-- request for the job is pending (filed while an earlier attempt's end was
-- being recorded, which could not see it: see cancel_job), or when the job
-- is a step of a workflow cancelled after the step's last retry by an
-- operator, if any (see workflow_cancel; looked up only for a step: a retry
-- of a step after its workflow's cancel runs the step, see
-- docs/workflows.md). Such a step gets a request naming the attempt just
-- started and its workflow's cause, so that its failure ends the job
-- cancelled (fail_job); its worker fails the attempt without running its
-- handler. A plain job costs one probe of cancel_requests.
--
-- A pending request is only read, never written or locked here: fail_job
-- honours a request for any attempt, and maintenance moves one to the
-- attempt running (apply_cancel_requests). Maintenance holds a request's
-- row while it cancels the job, retrying the job's row until the claim
-- that holds it commits: a claim that waited for that request's row would
-- never commit. A workflow's step gets a request of its own, inserted only
-- where none is (DO NOTHING takes no lock on one that is), and the one that
-- is keeps its cause. Written in PL/pgSQL, as start_held is, so that its
-- statements' plans are kept for the session: a SQL function's are made
-- again at every call.
CREATE OR REPLACE FUNCTION pgtask.cancel_claimed(p_jobs pgtask.claimed_job[])
RETURNS TABLE (
    id bigint, queue text, kind text, group_key text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fail_blocks_group boolean, created_at timestamptz,
    run_after timestamptz, metadata jsonb, scanned boolean, snoozes integer, cancel_cause text
)
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_jobs) AS u WHERE u.workflow_id IS NOT NULL) THEN
        INSERT INTO pgtask.cancel_requests AS r (job_id, attempt, cause)
        SELECT u.id, u.attempts, k.cause
          FROM unnest(p_jobs) AS u,
               LATERAL (SELECT CASE WHEN w.cancelled_by_step IS NULL THEN 'workflow'
                                    ELSE 'step:' || w.cancelled_by_step END AS cause
                          FROM pgtask.workflows w, pgtask.jobs s
                         WHERE w.id = u.workflow_id AND w.cancelled_at IS NOT NULL AND s.id = u.id
                           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(s.errors) e
                                            WHERE e ? 'operator_retry' AND (e->>'at')::timestamptz > w.cancelled_at)) k
         WHERE u.workflow_id IS NOT NULL
        ON CONFLICT (job_id) DO NOTHING;
    END IF;
    RETURN QUERY
      SELECT u.id, u.queue, u.kind, u.group_key, u.priority, u.payload, u.attempts, u.max_attempts,
             u.fail_blocks_group, u.created_at, u.run_after, u.metadata, u.scanned, u.snoozes, c.cause
        FROM unnest(p_jobs) AS u
        LEFT JOIN pgtask.cancel_requests c ON c.job_id = u.id
       ORDER BY u.priority, u.id;
END;
$$;

-- Starts the jobs p_ids a held-mode claim picked (locked) and returns them
-- as claim_jobs does, in priority, id order; only the heads p_heads its
-- scans found may move the worker's cursor (see scanned; p_exhausted: the
-- scans came up short). The limited jobs p_admitted took a slot of their
-- key in the claim (see pick_admitted): they start admitted (is_head).
CREATE OR REPLACE FUNCTION pgtask.start_held(p_ids bigint[], p_worker integer, p_token bigint, p_heads bigint[],
                                             p_promoted bigint[], p_after_priority smallint, p_after_id bigint,
                                             p_exhausted boolean, p_admitted bigint[])
RETURNS TABLE (
    id bigint, queue text, kind text, group_key text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fail_blocks_group boolean, created_at timestamptz,
    run_after timestamptz, metadata jsonb, scanned boolean, snoozes integer, cancel_cause text
)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgtask.jobs j
           SET status = 'started', attempts = j.attempts + 1,
               started_at = statement_timestamp(), owner_pid = pg_backend_pid(), worker_id = p_worker,
               claim_token = p_token, lease_until = NULL, is_head = j.is_head OR j.id = ANY (p_admitted)
         WHERE j.id = ANY (p_ids)
        RETURNING ROW(j.id, j.queue, j.kind, j.group_key, j.priority, j.payload,
                  j.attempts, j.max_attempts, j.fail_blocks_group, j.created_at,
                  j.run_after, j.metadata,
                  -- A fair queue's heads (with a turn) move no cursor: its
                  -- claims take them by turn, from the start. A head that
                  -- kept its turn from when its queue was fair does: the
                  -- queue is claimed by (priority, id) again. (Looked up
                  -- only for a job with a turn.)
                  j.id = ANY (p_heads)
                  AND CASE WHEN j.fair_seq IS NULL THEN true
                           ELSE NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = j.queue) END
                  AND pgtask.scanned(j.id, j.priority, p_promoted, p_after_priority, p_after_id, p_exhausted),
                  j.snoozes, j.workflow_id)::pgtask.claimed_job AS job
    )
    SELECT * FROM pgtask.cancel_claimed(ARRAY(SELECT c.job FROM claimed c));
END;
$$;

-- The heads a settle in this transaction promoted for its claim (see
-- pick_heads), announced instead to whoever takes them: a claim that rate-
-- limited jobs filled has no room for them.
CREATE OR REPLACE FUNCTION pgtask.leave_promoted(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    promoted bigint[] := string_to_array(nullif(current_setting('pgtask.promoted', true), ''), ',')::bigint[];
BEGIN
    IF promoted IS NOT NULL THEN
        PERFORM set_config('pgtask.promoted', '', true);
        PERFORM pg_notify('pgtask_behind', (SELECT min(u) FROM unnest(promoted) u) || ':' || p_queue);
    END IF;
END;
$$;

-- Locks a batch's claimed jobs for the job transaction (its first statement)
-- and bounds how long that transaction may sit idle, so a worker that hangs
-- rather than dies still releases its jobs. Returns the ids it locked: the
-- jobs still started by this session.
CREATE OR REPLACE FUNCTION pgtask.hold_jobs(p_ids bigint[], p_idle_timeout_ms bigint) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true);
    RETURN QUERY
        SELECT id FROM pgtask.jobs
         WHERE id = ANY (p_ids) AND status::text = 'started' AND owner_pid = pg_backend_pid()
         ORDER BY id
           FOR UPDATE;
END;
$$;

-- Records the successful attempts of a batch in one statement: only jobs
-- still in the started attempt the caller ran are changed (a job rescued or
-- changed meanwhile is not). A grouped job stays its group's head until the
-- group is advanced. Returns how many it recorded.
CREATE OR REPLACE FUNCTION pgtask.complete_jobs(p_ids bigint[], p_attempts integer[], p_results jsonb[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    recorded integer;
BEGIN
    UPDATE pgtask.jobs j
       SET status = 'succeeded', result = d.result, finished_at = clock_timestamp(),
           is_head = (j.is_head AND j.group_key IS NOT NULL), owner_pid = NULL
      FROM unnest(p_ids, p_attempts, p_results) AS d(id, attempt, result)
     WHERE j.id = d.id AND j.status::text = 'started' AND j.attempts = d.attempt;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END;
$$;

-- Locks, as the first statement of a job transaction, the jobs the previous
-- transaction's claim took with p_token and that this session still holds
-- started. Needing no ids, it can be sent in the same round trip as that
-- claim and its commit. Sets the transaction's idle timeout like hold_jobs.
-- Returns the ids it locked.
CREATE OR REPLACE FUNCTION pgtask.hold_claimed_jobs(p_token bigint, p_idle_timeout_ms bigint) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true);
    RETURN QUERY
        SELECT id FROM pgtask.jobs
         WHERE claim_token = p_token AND status = 'started' AND owner_pid = pg_backend_pid()
         ORDER BY id
           FOR UPDATE;
END;
$$;

-- Counts, on each job, an outcome refused because its attempt was no longer
-- the job's current one (see stale_outcomes in 0001_baseline.sql).
CREATE OR REPLACE FUNCTION pgtask.count_stale_outcomes(p_ids bigint[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE pgtask.jobs SET stale_outcomes = stale_outcomes + 1 WHERE id = ANY (p_ids);
$$;

-- The groups of p_groups that jobs p_ids belong to, each once, in order,
-- with the head it had among them (still marked: only advancing unmarks a
-- head), or NULL; see settle_jobs, whose advancing then need not look it
-- up. A function of its own for its generic plan, which reads the ids in
-- the primary key: in settle_jobs, where plans are custom, the statement
-- was planned anew at every call with its arrays as constants, and for a
-- batch of 50 jobs that planning took longer than the update that recorded
-- them.
CREATE OR REPLACE FUNCTION pgtask.settled_groups(p_ids bigint[], p_groups text[], OUT groups text[], OUT heads bigint[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    SELECT coalesce(array_agg(g.k ORDER BY g.k), '{}'), coalesce(array_agg(g.h ORDER BY g.k), '{}') INTO groups, heads
      FROM (SELECT j.group_key AS k, max(j.id) FILTER (WHERE j.is_head) AS h
              FROM pgtask.jobs j
             WHERE j.id = ANY (p_ids) AND j.group_key = ANY (p_groups)
             GROUP BY j.group_key) g;
END;
$$;

-- Records how a batch's attempts ended, in one statement, and moves their
-- groups on. Each element of the arrays is one attempt: p_errors NULL for a
-- success (p_results its result), else the failure's error entry, with
-- p_retry_in_us the backoff before the next attempt, or below zero for none
-- (see fail_job). A snooze (runtime.Snooze) has its kind's cap on snoozes
-- in p_snooze_caps and the token of the claim that took the job in
-- p_tokens; other outcomes have 0 in both (see fail_job). Only jobs still in
-- the started attempt the caller ran change.
-- An outcome whose attempt is no longer the job's current one (a stale
-- worker's, after another took the job over) is refused and counted.
-- Groups are advanced without patience (the caller's transaction holds its
-- jobs' locks). With p_claiming (a claim follows in the same transaction)
-- a few groups' new heads are left for that claim to take first (see
-- pick_heads) instead of waking workers for them; busy names those an enqueue kept from moving on, for the
-- caller to try again after its commit.
--
-- A job whose p_results element is not NULL is announced when it ends
-- (succeeded, or failed for good, or cancelled): its id goes out on the
-- pgtask_finished channel, for those waiting for its result (WaitJobs in
-- the runtime). Workers pass one for every job of a kind with a result,
-- JSON null for a failure (no result is stored for one), and NULL for
-- other kinds: a notification is sent with the commit, and a committing
-- transaction that notifies holds the database's notify lock until its
-- commit is done, so transactions that notify commit one at a time. Only
-- the jobs someone can wait for pay that, one notification per call.
CREATE OR REPLACE FUNCTION pgtask.settle_jobs(
    p_queue text, p_ids bigint[], p_attempts integer[], p_results jsonb[], p_errors jsonb[], p_retry_in_us bigint[],
    p_snooze_caps integer[], p_tokens bigint[], p_claiming boolean, OUT recorded integer, OUT busy text[])
LANGUAGE plpgsql AS $$
DECLARE
    groups text[];
    f record;
    outcome pgtask.job_status;
    head_group text;
    was_head boolean;
    heads bigint[];
    grp record;
    done_ids bigint[];
    announced bigint[];
    steps bigint[];
    quiet text;
BEGIN
    -- A slot of a limit this frees and hands on (see functions/limits.sql)
    -- is left for the claim that follows, like a group's next head.
    -- A workflow's step these outcomes release is left for that claim too
    -- when it is of this queue (see workflow_release). Both set in one
    -- statement: every settle runs it.
    PERFORM set_config('pgtask.claiming', CASE WHEN p_claiming THEN 'on' ELSE 'off' END, true),
            set_config('pgtask.settling', p_queue, true);
    IF cardinality(p_ids) = 1 AND p_errors[1] IS NULL THEN
        -- One success, as BatchSize 1 gives: plain statements whose plans
        -- the session keeps. A group's head, its attempt still current:
        -- with its row and then its group's row locked (the order of the
        -- path below, and of a takeover that fails the job and advances its
        -- group; in the held mode the job transaction holds the row
        -- already), the success unmarks the head in the same update, and
        -- the group moves on (see move_group_on); one update of the row
        -- fewer.
        SELECT group_key, is_head INTO head_group, was_head FROM pgtask.jobs
         WHERE id = p_ids[1] AND group_key IS NOT NULL
           AND status::text = 'started' AND attempts = p_attempts[1]
           FOR NO KEY UPDATE;
        IF head_group IS NOT NULL AND was_head THEN
            PERFORM pgtask.require_read_committed('advancing a group');
            SELECT id, pending_from INTO grp FROM pgtask.queue_groups
             WHERE queue = p_queue AND group_key = head_group
               FOR UPDATE SKIP LOCKED;
            IF FOUND THEN
                UPDATE pgtask.jobs
                   SET status = 'succeeded', result = p_results[1], finished_at = clock_timestamp(),
                       is_head = false, owner_pid = NULL
                 WHERE id = p_ids[1];
                recorded := 1;
                busy := '{}';
                PERFORM pgtask.move_group_on(p_queue, head_group, grp.id, p_ids[1], grp.pending_from, NOT p_claiming);
                IF p_results[1] IS NOT NULL THEN
                    PERFORM pg_notify('pgtask_finished', p_ids[1]::text);
                END IF;
                RETURN;
            END IF;
        END IF;
        UPDATE pgtask.jobs
           SET status = 'succeeded', result = p_results[1], finished_at = clock_timestamp(),
               is_head = (is_head AND group_key IS NOT NULL), owner_pid = NULL
         WHERE id = p_ids[1] AND status::text = 'started' AND attempts = p_attempts[1]
        RETURNING group_key, is_head INTO head_group, was_head;
        recorded := CASE WHEN FOUND THEN 1 ELSE 0 END;
        busy := '{}';
        IF recorded = 0 THEN
            PERFORM pgtask.count_stale_outcomes(p_ids);
            RETURN;
        END IF;
        IF p_results[1] IS NOT NULL THEN
            PERFORM pg_notify('pgtask_finished', p_ids[1]::text);
        END IF;
        IF head_group IS NOT NULL AND NOT was_head THEN
            -- A job of a run behind its group's head, which finished before
            -- it without moving the group on (an enqueue was in flight):
            -- the group moves on past both, as in a batch (below).
            busy := pgtask.advance_group_set(p_queue, ARRAY[head_group], NULL);
        ELSIF head_group IS NOT NULL AND NOT pgtask.advance_one_group(p_queue, head_group, p_ids[1], NOT p_claiming) THEN
            busy := ARRAY[head_group];
        END IF;
        RETURN;
    END IF;
    -- The slots of limits these outcomes free are released together, each
    -- key's at once, after them (see release_deferred_slots). So are what
    -- they mean to the children of workflow steps among them (see
    -- workflow_settle_deferred): the successes' steps are queued below,
    -- all at once, with the trigger that would queue each one kept quiet
    -- meanwhile; the failures' triggers queue theirs. Quiet covers every
    -- row trigger the update fires, to the end of its statement: none of
    -- them finishes or unfinishes another job (limit_release only notes a
    -- slot while defer_slots is on), and one that did would go unheard.
    quiet := current_setting('pgtask.wf_quiet', true);
    PERFORM set_config('pgtask.defer_slots', 'on', true), set_config('pgtask.wf_defer', 'on', true),
            set_config('pgtask.wf_quiet', 'on', true);
    WITH done AS (
        UPDATE pgtask.jobs j
           SET status = 'succeeded', result = d.result, finished_at = clock_timestamp(),
               is_head = (j.is_head AND j.group_key IS NOT NULL), owner_pid = NULL
          FROM unnest(p_ids, p_attempts, p_results, p_errors) AS d(id, attempt, result, error)
         WHERE d.error IS NULL AND j.id = d.id AND j.status::text = 'started' AND j.attempts = d.attempt
        RETURNING j.id, j.group_key, d.result IS NOT NULL AS announce, j.workflow_id IS NOT NULL AS step
    )
    SELECT count(*), coalesce(array_agg(group_key) FILTER (WHERE group_key IS NOT NULL), '{}'),
           coalesce(array_agg(id), '{}'), coalesce(array_agg(id) FILTER (WHERE announce), '{}'),
           coalesce(array_agg(id) FILTER (WHERE step), '{}')
      INTO recorded, groups, done_ids, announced, steps
      FROM done;
    PERFORM set_config('pgtask.wf_quiet', coalesce(quiet, ''), true);
    IF cardinality(steps) > 0 AND quiet IS DISTINCT FROM 'on' THEN
        PERFORM pgtask.workflow_steps_changed(steps, 's');
    END IF;
    FOR f IN
        SELECT d.id, d.attempt, d.error, d.retry, d.snooze_cap, d.token, d.result IS NOT NULL AS announce, j.group_key
          FROM unnest(p_ids, p_attempts, p_errors, p_retry_in_us, p_results, p_snooze_caps, p_tokens)
                AS d(id, attempt, error, retry, result, snooze_cap, token)
          JOIN pgtask.jobs j ON j.id = d.id
         WHERE d.error IS NOT NULL
         ORDER BY d.id
    LOOP
        outcome := pgtask.fail_job(f.id, f.attempt, f.error, CASE WHEN f.retry >= 0 THEN f.retry END,
                                   nullif(f.snooze_cap, 0), nullif(f.token, 0));
        CONTINUE WHEN outcome IS NULL;
        done_ids := done_ids || f.id;
        recorded := recorded + 1;
        IF outcome IN ('failed', 'cancelled') AND f.group_key IS NOT NULL THEN
            groups := groups || f.group_key;
        END IF;
        IF outcome IN ('failed', 'cancelled') AND f.announce THEN
            announced := announced || f.id;
        END IF;
    END LOOP;
    PERFORM pgtask.release_deferred_slots();
    PERFORM pgtask.workflow_settle_deferred();
    -- A payload holds at most 8000 bytes: 300 ids of up to 19 digits.
    FOR i IN 0 .. (cardinality(announced) - 1) / 300 LOOP
        EXIT WHEN cardinality(announced) = 0;
        PERFORM pg_notify('pgtask_finished', array_to_string(announced[i * 300 + 1 : (i + 1) * 300], ','));
    END LOOP;
    IF recorded < cardinality(p_ids) THEN
        PERFORM pgtask.count_stale_outcomes(ARRAY(SELECT u FROM unnest(p_ids) u WHERE u <> ALL (done_ids)));
    END IF;
    busy := '{}';
    IF cardinality(groups) = 0 THEN
        RETURN; -- no grouped job among them
    END IF;
    SELECT s.groups, s.heads INTO groups, heads FROM pgtask.settled_groups(done_ids, groups) s;
    IF cardinality(groups) <= 4 THEN
        -- A few groups, as BatchSize 1 gives: one at a time is cheaper.
        FOR i IN 1 .. cardinality(groups) LOOP
            IF heads[i] IS NULL THEN
                busy := busy || pgtask.advance_group_set(p_queue, ARRAY[groups[i]], NULL);
            ELSIF NOT pgtask.advance_one_group(p_queue, groups[i], heads[i], NOT p_claiming) THEN
                busy := busy || groups[i];
            END IF;
        END LOOP;
    ELSE
        busy := pgtask.advance_group_set(p_queue, groups, heads);
    END IF;
END;
$$;

-- A job's error history with p_entry (a one-element array) appended,
-- keeping the newest 25 entries: a job that retries for ever must not grow
-- a history that costs more to read and write with every attempt. The
-- newest entries are sliced out by position, in one pass over the history
-- however long it is (one stored before it was bounded may hold thousands):
-- reading it element by element and measuring it for each one read the
-- whole of it again per element (20,000 entries took 25 seconds).
CREATE OR REPLACE FUNCTION pgtask.append_error(p_errors jsonb, p_entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_array_length(p_errors) < 25 THEN p_errors || p_entry
                ELSE jsonb_path_query_array(p_errors, '$[last - 23 to last]') || p_entry
           END
$$;

-- Records a failed attempt. p_retry_in_us is the backoff before the next
-- attempt in microseconds, or NULL for "do not retry". A job out of attempts
-- fails for good; its group then moves on when advanced, or stays blocked, as
-- the job says. A retry keeps its place at the head: the group waits. A
-- job an operator asked to cancel (a row in pgtask.cancel_requests, for
-- whichever attempt) ends cancelled instead, whatever its attempts and backoff; the caller then advances its
-- group as after a final failure. A request that commits after this
-- function looked is not lost: the job's next claim finds it (see
-- cancel_claimed). Returns the job's new status, or NULL when the job is not the started
-- attempt the caller ran.
--
-- A snooze (runtime.Snooze) comes with p_snooze_cap, its kind's cap on
-- snoozes (NULL: not a snooze): the job runs again after p_retry_in_us with
-- its attempt given back (attempts - 1, as a hand-back does) and its snooze
-- count raised, and p_error is not stored; a grouped job stays its group's
-- head, as for a retry. The snooze that takes the count past the cap fails
-- the job for good instead, with an entry saying so, whatever its attempts;
-- a cancel request wins over both. Since a snooze's attempt number comes
-- round again, p_token, the token of the claim that took the job (NULL:
-- none), fences the record as well: a record sent again after its reply was
-- lost must not apply to the job's next claim, nor end it cancelled.
CREATE OR REPLACE FUNCTION pgtask.fail_job(p_id bigint, p_attempt integer, p_error jsonb, p_retry_in_us bigint,
                                           p_snooze_cap integer, p_token bigint)
RETURNS pgtask.job_status
LANGUAGE plpgsql AS $$
DECLARE
    j pgtask.jobs;
    next_status pgtask.job_status;
    entry jsonb := jsonb_build_array(p_error || jsonb_build_object('at', clock_timestamp()));
BEGIN
    SELECT * INTO j FROM pgtask.jobs
     WHERE id = p_id AND status::text = 'started' AND attempts = p_attempt
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_token IS NOT NULL AND j.claim_token IS DISTINCT FROM p_token THEN
        RETURN NULL; -- another claim's attempt of the same number
    END IF;

    IF EXISTS (SELECT 1 FROM pgtask.cancel_requests r WHERE r.job_id = p_id) THEN
        -- An operator cancelled the job (see cancel_job; a request names
        -- the job, whichever attempt it was filed for): the job ends here,
        -- and its group moves on.
        DELETE FROM pgtask.cancel_requests WHERE job_id = p_id;
        UPDATE pgtask.jobs
           SET status = 'cancelled', finished_at = clock_timestamp(), owner_pid = NULL,
               errors = pgtask.append_error(errors, entry), is_head = (is_head AND group_key IS NOT NULL)
         WHERE id = p_id;
        PERFORM pg_notify('pgtask_finished', p_id::text);
        RETURN 'cancelled';
    END IF;
    IF p_snooze_cap IS NOT NULL AND p_retry_in_us IS NOT NULL THEN
        IF j.snoozes >= p_snooze_cap THEN
            UPDATE pgtask.jobs
               SET status = 'failed', finished_at = clock_timestamp(), owner_pid = NULL, snoozes = j.snoozes + 1,
                   errors = pgtask.append_error(errors, jsonb_build_array(jsonb_build_object(
                       'attempt', p_attempt,
                       'error', format('snoozed %s times, cap %s', j.snoozes + 1, p_snooze_cap),
                       'at', clock_timestamp()))),
                   is_head = (is_head AND group_key IS NOT NULL)
             WHERE id = p_id;
            PERFORM pg_notify('pgtask_finished', p_id::text);
            RETURN 'failed';
        END IF;
        next_status := CASE WHEN p_retry_in_us > 0 THEN 'scheduled' ELSE 'queued' END;
        UPDATE pgtask.jobs
           SET status = next_status,
               run_after = clock_timestamp() + p_retry_in_us * interval '1 microsecond',
               owner_pid = NULL, attempts = j.attempts - 1, snoozes = j.snoozes + 1
         WHERE id = p_id;
        IF next_status = 'queued' AND j.is_head THEN
            PERFORM pg_notify('pgtask_behind', p_id::text || ':' || j.queue);
        END IF;
        RETURN next_status;
    END IF;
    IF p_retry_in_us IS NULL OR j.attempts >= j.max_attempts THEN
        UPDATE pgtask.jobs
           SET status = 'failed', finished_at = clock_timestamp(), owner_pid = NULL,
               errors = pgtask.append_error(errors, entry), is_head = (is_head AND group_key IS NOT NULL)
         WHERE id = p_id;
        -- Those waiting for its result (WaitJobs) learn it ended, whoever
        -- recorded the failure: a worker, or maintenance for a worker that
        -- died on the job's last attempt. A final failure is rare enough
        -- that announcing it for every kind costs nothing to speak of.
        PERFORM pg_notify('pgtask_finished', p_id::text);
        RETURN 'failed';
    END IF;

    next_status := CASE WHEN p_retry_in_us > 0 THEN 'scheduled' ELSE 'queued' END;
    UPDATE pgtask.jobs
       SET status = next_status,
           run_after = clock_timestamp() + p_retry_in_us * interval '1 microsecond',
           owner_pid = NULL,
           errors = pgtask.append_error(errors, entry)
     WHERE id = p_id;
    IF next_status = 'queued' AND j.is_head THEN
        PERFORM pg_notify('pgtask_behind', p_id::text || ':' || j.queue);
    END IF;
    RETURN next_status;
END;
$$;

-- Hands back claimed jobs whose handlers never started: a worker shutting
-- down, a held batch cut short, the jobs of a lease-mode run behind one
-- that stopped it, those its worker lost the session of (held) or the
-- claim's reply of (lease). The one rule for all of them: the attempt is
-- returned, since nothing ran, and the job holds no claim. A job an
-- operator asked to cancel in that attempt (see cancel_job) ends cancelled
-- instead: requeued, it could be claimed and run again before maintenance
-- applied the request. If it was its group's head, the group moves on with
-- maintenance, as after any head that finished. A runnable head requeued
-- wakes idle workers, so others take it at once. Returns how many jobs it
-- handed back, and how many queues it woke.
--
-- The fence says whose claim is handed back, so that a job that moved on
-- meanwhile (finished, taken over, or handed back and claimed again) is
-- left alone:
--   held mode (p_owner_pid set): the session p_owner_pid of worker p_worker
--     that claimed the jobs;
--   lease mode (p_owner_pid NULL): each job's attempt (p_attempts) and the
--     token of the claim that took it (p_tokens), since a hand-back makes
--     an attempt's number come round again.
-- p_ids names the jobs. NULL: every job of the claim: all that the session
-- holds (held), or all that the claim marked p_tokens[1] took (lease),
-- found when the caller cannot name them. A call without its fence is
-- refused: it would hand back nothing, or more than it should, in silence.
CREATE OR REPLACE FUNCTION pgtask.hand_back(p_ids bigint[], p_owner_pid integer, p_worker integer,
                                            p_attempts integer[], p_tokens bigint[])
RETURNS TABLE (released bigint, woken bigint)
LANGUAGE plpgsql AS $$
DECLARE
    queues text[];
    cancelled bigint[];
BEGIN
    IF p_owner_pid IS NOT NULL AND p_worker IS NULL THEN
        RAISE EXCEPTION 'pgtask.hand_back: the held mode''s fence needs the worker of session %', p_owner_pid
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_owner_pid IS NULL AND p_ids IS NULL AND cardinality(p_tokens) IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'pgtask.hand_back: a whole claim needs its session and worker (held mode) or its one token (lease mode)'
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF p_owner_pid IS NULL AND p_ids IS NOT NULL
          AND (cardinality(p_tokens) IS DISTINCT FROM cardinality(p_ids)
               OR cardinality(p_attempts) IS DISTINCT FROM cardinality(p_ids)) THEN
        RAISE EXCEPTION 'pgtask.hand_back: the lease mode''s fence needs an attempt and a token for each of the % jobs', cardinality(p_ids)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_ids IS NULL AND p_owner_pid IS NOT NULL THEN
        SELECT array_agg(s.id) INTO p_ids
          FROM pgtask.jobs s
         WHERE s.status = 'started' AND s.owner_pid = p_owner_pid AND s.worker_id = p_worker;
    ELSIF p_ids IS NULL THEN
        SELECT array_agg(s.id), array_agg(s.attempts), array_agg(s.claim_token) INTO p_ids, p_attempts, p_tokens
          FROM pgtask.jobs s
         WHERE s.claim_token = p_tokens[1] AND s.status = 'started' AND s.lease_until IS NOT NULL;
    END IF;
    WITH gone AS (
        UPDATE pgtask.jobs j
           SET status = CASE WHEN r.job_id IS NOT NULL THEN 'cancelled' ELSE 'queued' END::pgtask.job_status,
               finished_at = CASE WHEN r.job_id IS NOT NULL THEN clock_timestamp() ELSE j.finished_at END,
               attempts = j.attempts - 1, owner_pid = NULL, lease_until = NULL, claim_token = NULL
          FROM unnest(p_ids, p_attempts, p_tokens) AS u(id, attempt, token)
          LEFT JOIN pgtask.cancel_requests r ON r.job_id = u.id
         WHERE j.id = u.id AND j.status::text = 'started'
           AND CASE WHEN p_owner_pid IS NOT NULL
                    THEN j.owner_pid = p_owner_pid AND j.worker_id = p_worker
                    ELSE j.lease_until IS NOT NULL AND j.attempts = u.attempt AND j.claim_token = u.token
               END
        RETURNING j.id, j.queue, j.status, j.is_head
    )
    , woke AS (
        SELECT g.queue, min(g.id) AS first FROM gone g WHERE g.is_head AND g.status = 'queued' GROUP BY g.queue
    )
    SELECT (SELECT count(*) FROM gone),
           (SELECT array_agg(w.first::text || ':' || w.queue) FROM woke w),
           (SELECT array_agg(g.id) FROM gone g WHERE g.status = 'cancelled')
      INTO released, queues, cancelled;
    -- Each queue's first requeued head, a colon and the queue (see
    -- pgtask_behind in pick_heads).
    PERFORM pg_notify('pgtask_behind', q) FROM unnest(queues) q;
    -- A job an operator asked to cancel ends here: its waiters learn it.
    PERFORM pg_notify('pgtask_finished', c::text) FROM unnest(cancelled) c;
    woken := coalesce(cardinality(queues), 0);
    RETURN NEXT;
END;
$$;

-- Lease mode. A worker claims jobs with a lease and runs their handlers
-- without holding a connection; it records their outcomes in batches with
-- settle_jobs, fenced by attempt like every outcome. Its heartbeat extends
-- the leases of the jobs it runs (extend_leases). A job whose worker died is
-- rescued at once, since its worker lock is gone (rescue_orphans: a leased
-- job has no owner session); one whose lease ran out while its worker lives
-- (hung, or cut off from the database) is taken over by another worker
-- (expire_leases), and the late outcome of the stale attempt is refused.

-- Claims up to p_max jobs of a queue with a lease of p_lease_ms: runnable
-- heads, by priority then id (see pick_heads for the cursor), and, to fill
-- the claim, the runs of up to p_run_max jobs behind grouped heads (see
-- pick_runs), which the worker runs one at a time in order. Their attempts
-- are counted and committed before any handler runs. A group's next job
-- that is not in a run becomes claimable when its head's success is
-- recorded, so FIFO holds as in the held mode. p_token marks the claim, so
-- that a worker that lost the reply can hand back what it may have claimed
-- (hand_back). p_kinds, unless NULL, limits the claim to the
-- kinds the worker has handlers for (see pick_heads).
CREATE OR REPLACE FUNCTION pgtask.claim_leased_jobs(p_queue text, p_max integer, p_worker integer, p_lease_ms bigint,
                                                    p_after_priority smallint, p_after_id bigint, p_floor_id bigint,
                                                    p_behind_first boolean, p_token bigint, p_run_max integer, p_kinds text[])
RETURNS TABLE (
    id bigint, queue text, kind text, group_key text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fail_blocks_group boolean, created_at timestamptz,
    run_after timestamptz, metadata jsonb, scanned boolean, snoozes integer, cancel_cause text
)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    picked bigint[];
    heads bigint[];
    promoted bigint[];
    exhausted boolean;
    rated bigint[] := '{}';
    limited bigint[] := '{}';
BEGIN
    PERFORM pgtask.require_read_committed('claiming jobs');
    PERFORM pg_advisory_xact_lock_shared(pgtask.pause_lock_class(), hashtext(p_queue));
    IF EXISTS (SELECT 1 FROM pgtask.paused_queues q WHERE q.queue = p_queue) THEN
        RETURN;
    END IF;
    -- Rate-limited jobs first, then waiting jobs of limit keys with free
    -- slots, each taking a slot (no runs: handlers run side by side), as
    -- in claim_jobs.
    IF EXISTS (SELECT 1 FROM pgtask.rate_keys k
                WHERE k.queue = p_queue AND k.ready_at IS NOT NULL AND k.ready_at <= clock_timestamp()) THEN
        rated := pgtask.pick_rated(p_queue, p_max, p_kinds);
    END IF;
    IF cardinality(rated) < p_max
       AND EXISTS (SELECT 1 FROM pgtask.limit_keys k WHERE k.queue = p_queue AND k.waiting AND k.free > 0)
       AND NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) THEN
        SELECT a.admitted INTO limited FROM pgtask.pick_admitted(p_queue, p_max - cardinality(rated), 0, p_kinds) a;
        rated := rated || limited;
    END IF;
    -- A key made ready in this transaction that the claim left ready wakes
    -- the queue's workers (see wake_for_limit); without such a key, there
    -- is nothing to call for.
    IF current_setting('pgtask.limit_wakes', true) <> '' THEN
        PERFORM pgtask.wake_for_ready_keys(p_queue);
    END IF;
    promoted := string_to_array(nullif(current_setting('pgtask.promoted', true), ''), ',')::bigint[];
    IF cardinality(rated) < p_max THEN
        heads := pgtask.pick_heads(p_queue, p_max - cardinality(rated), p_after_priority, p_after_id, p_floor_id,
                                   p_behind_first, p_kinds);
        exhausted := cardinality(heads) < p_max - cardinality(rated);
    ELSE
        heads := '{}';
        exhausted := false;
        PERFORM pgtask.leave_promoted(p_queue);
    END IF;
    picked := heads;
    IF p_run_max > 0 AND cardinality(picked) BETWEEN 1 AND p_max - cardinality(rated) - 1 THEN
        picked := picked || pgtask.pick_runs(picked, p_max - cardinality(rated) - cardinality(picked), p_run_max, p_kinds);
    END IF;
    picked := rated || picked;
    RETURN QUERY
        WITH claimed AS (
            UPDATE pgtask.jobs j
               SET status = 'started', attempts = j.attempts + 1, started_at = statement_timestamp(),
                   owner_pid = NULL, worker_id = p_worker, claim_token = p_token,
                   lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
                   is_head = j.is_head OR j.id = ANY (limited)
             WHERE j.id = ANY (picked)
            RETURNING ROW(j.id, j.queue, j.kind, j.group_key, j.priority, j.payload,
                      j.attempts, j.max_attempts, j.fail_blocks_group, j.created_at,
                      j.run_after, j.metadata,
                      -- A fair queue's heads (with a turn) move no cursor:
                      -- its claims take them by turn, from the start. A
                      -- head that kept its turn from when its queue was
                      -- fair does: the queue is claimed by (priority, id)
                      -- again. (Looked up only for a job with a turn.)
                      j.id = ANY (heads)
                      AND CASE WHEN j.fair_seq IS NULL THEN true
                               ELSE NOT EXISTS (SELECT 1 FROM pgtask.fair_queues f WHERE f.queue = p_queue) END
                      AND pgtask.scanned(j.id, j.priority, promoted, p_after_priority, p_after_id, exhausted),
                      j.snoozes, j.workflow_id)::pgtask.claimed_job AS job
        )
        SELECT * FROM pgtask.cancel_claimed(ARRAY(SELECT c.job FROM claimed c));
END;
$$;

-- Extends to p_lease_ms from now the leases of claimed attempts, each named
-- by its job (p_ids), its attempt (p_attempts) and the token of the claim
-- that took it (p_tokens), and returns the ids it extended; an attempt left
-- out was taken over, handed back or settled, and its handler should stop.
-- The token tells apart two claims of one attempt number, which a hand-back
-- makes possible (it returns the attempt): the heartbeat of a worker that
-- handed a job back must not extend the lease of the worker that claimed
-- the job next, which would put off its takeover.
CREATE OR REPLACE FUNCTION pgtask.extend_leases(p_ids bigint[], p_attempts integer[], p_tokens bigint[], p_lease_ms bigint)
RETURNS SETOF bigint
LANGUAGE sql AS $$
    UPDATE pgtask.jobs j
       SET lease_until = greatest(j.lease_until, clock_timestamp() + p_lease_ms * interval '1 millisecond')
      FROM unnest(p_ids, p_attempts, p_tokens) AS d(id, attempt, token)
     WHERE j.id = d.id AND j.status::text = 'started' AND j.attempts = d.attempt AND j.claim_token = d.token
       AND j.lease_until IS NOT NULL
    RETURNING j.id;
$$;

-- Takes over leased jobs whose lease ran out while their worker lives: each
-- attempt is recorded as failed and retried at once (its group keeps its
-- place), and a last attempt fails for good and moves its group on. The
-- caller's own jobs (p_worker) are never its to take: it knows they run.
-- Returns the ids it took over. A job whose row cannot be written, since it
-- breaks a check the table was given NOT VALID after the row was stored, is
-- left as it is (see unwritable_row), and the others are taken over: all at
-- once, and only when that fails on such a row, each in a subtransaction of
-- its own (see rescue_jobs).
CREATE OR REPLACE FUNCTION pgtask.expire_leases(p_limit integer, p_worker integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    o record;
    entry jsonb;
    outcome pgtask.job_status;
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
                SELECT j.id, j.attempts, j.queue, j.group_key, j.worker_id, j.lease_until
                  FROM pgtask.jobs j
                 WHERE j.status = 'started' AND j.lease_until < clock_timestamp() AND j.owner_pid IS NULL
                   AND j.worker_id IS DISTINCT FROM p_worker
                 ORDER BY j.id
                 LIMIT p_limit
                   FOR UPDATE OF j SKIP LOCKED
            LOOP
                entry := jsonb_build_object(
                    'attempt', o.attempts,
                    'error', format('lease expired at %s: worker %s stopped answering for the job; taken over', o.lease_until, o.worker_id));
                IF careful THEN
                    BEGIN
                        outcome := pgtask.fail_job(o.id, o.attempts, entry, 0, NULL, NULL);
                    EXCEPTION WHEN integrity_constraint_violation THEN
                        GET STACKED DIAGNOSTICS bad = CONSTRAINT_NAME;
                        PERFORM pgtask.unwritable_row(format('job %s not taken over', o.id), bad);
                        CONTINUE;
                    END;
                ELSE
                    outcome := pgtask.fail_job(o.id, o.attempts, entry, 0, NULL, NULL);
                END IF;
                done := done || o.id;
                IF outcome IN ('failed', 'cancelled') AND o.group_key IS NOT NULL THEN
                    queues := queues || o.queue;
                    keys := keys || o.group_key;
                END IF;
            END LOOP;
            EXIT;
        EXCEPTION WHEN integrity_constraint_violation THEN
            IF careful THEN
                RAISE;
            END IF;
            careful := true;
        END;
    END LOOP;
    PERFORM pgtask.advance_each_group(queues, keys);
    RETURN QUERY SELECT unnest(done);
END;
$$;

-- The worker processes alive now: those whose worker lock (see LockWorker)
-- a session holds. Read from pg_locks, so that asking takes no lock.
CREATE OR REPLACE FUNCTION pgtask.live_workers()
RETURNS TABLE (worker_id integer)
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT l.objid::bigint::integer
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
       AND l.classid = pgtask.worker_lock_class()::oid;
$$;

-- Records that worker p_worker has handlers for p_kinds in each of the
-- queues p_queues (see the worker_kinds table), in place of what it
-- recorded before, and deletes the rows of workers that are gone.
CREATE OR REPLACE FUNCTION pgtask.record_worker_kinds(p_worker integer, p_queues text[], p_kinds text[])
RETURNS void
LANGUAGE sql AS $$
    DELETE FROM pgtask.worker_kinds w
     WHERE w.worker_id = p_worker
        OR w.worker_id NOT IN (SELECT l.worker_id FROM pgtask.live_workers() l);
    INSERT INTO pgtask.worker_kinds (worker_id, queue, kind)
    SELECT DISTINCT p_worker, q, k FROM unnest(p_queues) q, unnest(p_kinds) k;
$$;

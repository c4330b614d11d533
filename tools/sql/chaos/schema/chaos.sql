-- The record of one pgtask-chaos run, in a schema of its own beside pgtask's.
-- No table has a foreign key to pgtask.jobs: checking one would lock the job's
-- row, which the job's own transaction holds while its handler writes here
-- through another connection.
CREATE SCHEMA pgtask_chaos;

-- Every job the producer committed. Written in the transaction that enqueued
-- the job, so a row exists here if and only if the job's insert committed.
CREATE TABLE pgtask_chaos.enqueued (
    job_id    bigint PRIMARY KEY,
    -- NULL for an ungrouped job.
    group_key text,
    -- Position in the group (or among ungrouped jobs) in enqueue order.
    seq       integer NOT NULL,
    -- What the handler does: ok, fail, fail2, panic, timeout, noretry,
    -- exhaust, poison, long.
    behavior  text NOT NULL,
    -- enqueue_many (EnqueueMany), enqueue (Enqueue), workflow
    -- (Workflow.Enqueue) or enqueue_batch (EnqueueBatch, its jobs and
    -- callbacks).
    how       text NOT NULL,
    -- The job's concurrency limit (runtime.WithLimit) when limit_max is set:
    -- at most limit_max jobs of limit_key ('' for the queue's own limit) run
    -- at once. NULL limit_max: the job has none.
    limit_key text NOT NULL DEFAULT '',
    limit_max integer,
    -- How the job must end: succeeded, failed or cancelled (a workflow step
    -- after a parent that failed under the default policy, a batch's
    -- OnFailure callback when no job of its batch fails). A step of a
    -- workflow that is cancelled as a whole (see pgtask_chaos.workflows)
    -- may end cancelled instead.
    expect    text NOT NULL,
    -- A batch's callback: finish (OnFinish) or failure (OnFailure); NULL
    -- for any other job.
    callback  text
);

-- Every workflow the producer committed, written in the transaction that
-- enqueued it. cancel_expected: a step whose edge to a child says
-- OrCancelWorkflow is meant to fail (or to be cancelled), so the workflow
-- must end cancelled as a whole; operator_cancel: an operator's
-- CancelWorkflowByID was planned for it, soon after its commit, while its
-- steps run.
CREATE TABLE pgtask_chaos.workflows (
    workflow_id     bigint PRIMARY KEY,
    steps           integer NOT NULL,
    cancel_expected boolean NOT NULL,
    operator_cancel boolean NOT NULL
);

-- The operator's cancels the run carried out: written in the transaction of
-- CancelWorkflowByID, so a row exists if and only if the cancel committed.
CREATE TABLE pgtask_chaos.operator_cancels (
    workflow_id bigint PRIMARY KEY,
    -- Whether CancelWorkflowByID marked it (false: cancelled already, by a
    -- failure whose edge said so).
    marked      boolean NOT NULL
);

-- Every workflow cancelled as a whole (by a failure whose edge says so, or
-- by an operator), written by a trigger on pgtask.workflows in the
-- transaction that marks it (see pgtask_chaos.note_workflow_cancel): xid is
-- that transaction's, whose commit time pg_xact_commit_timestamp gives (the
-- run's cluster has track_commit_timestamp on). No step of the workflow may
-- be claimed after that. at is when the transaction marked it and
-- backend_pid its session: a claim on that session after at is one in the
-- marking transaction itself (a held-mode runner's, whose settle cancelled
-- the workflow), before the commit, which must see the mark too.
CREATE TABLE pgtask_chaos.workflow_cancels (
    workflow_id bigint PRIMARY KEY,
    xid         xid NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    backend_pid integer NOT NULL DEFAULT pg_backend_pid()
);

-- Every batch the producer committed (runtime.EnqueueBatch, with both
-- callbacks), written in the transaction that enqueued it; its jobs and
-- callbacks are in enqueued. expect_failure: one of its jobs is meant to
-- fail for good, so its OnFailure callback must run.
CREATE TABLE pgtask_chaos.batches (
    batch_id       bigint PRIMARY KEY,
    jobs           integer NOT NULL,
    expect_failure boolean NOT NULL
);

-- What a batch's callback saw, written by its handler through job.Tx(): it
-- commits only with the attempt's success. The counts are its
-- runtime.BatchSummary.
CREATE TABLE pgtask_chaos.callback_runs (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    bigint NOT NULL,
    attempt   integer NOT NULL,
    batch_id  bigint NOT NULL,
    finished  boolean NOT NULL,
    total     integer NOT NULL,
    succeeded integer NOT NULL,
    failed    integer NOT NULL,
    cancelled integer NOT NULL,
    deleted   integer NOT NULL
);

CREATE INDEX callback_runs_job ON pgtask_chaos.callback_runs (job_id);

-- Job ids handed out inside transactions that did not commit: rolled back on
-- purpose (whole transaction or to a savepoint), or cut off by a fault. None
-- of them may ever exist or run.
CREATE TABLE pgtask_chaos.not_committed (
    job_id    bigint PRIMARY KEY,
    group_key text,
    -- rollback, savepoint or failed.
    reason    text NOT NULL
);

-- One row per attempt a handler started, written outside the job's
-- transaction (autocommit) as the handler begins; ended_at and outcome are
-- set when the handler returns. The database's clock stamps both, so every
-- process shares one clock. An attempt whose process was killed has no end.
CREATE TABLE pgtask_chaos.attempts (
    -- Chosen by the handler (its process's instance and a counter), so that
    -- a start written again after a lost reply is not recorded twice.
    id          bigint PRIMARY KEY,
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    group_key   text,
    -- The worker process: a number unique within the run, and its OS pid.
    instance    integer NOT NULL,
    worker_pid  integer NOT NULL,
    -- The queue's mode in that process: held or lease.
    mode        text NOT NULL,
    -- The job transaction's backend; 0 for a long job, whose handler
    -- records its start before it begins the job's transaction.
    backend_pid integer NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at    timestamptz,
    -- ok, error, panic, timeout, noretry, effect_error, cancelled.
    outcome     text
);

CREATE INDEX attempts_job ON pgtask_chaos.attempts (job_id, attempt);
CREATE INDEX attempts_group ON pgtask_chaos.attempts (group_key, started_at, id);
-- Handlers running now, by their job's backend (see BusyWorkerBackends).
CREATE INDEX attempts_running ON pgtask_chaos.attempts (backend_pid) WHERE ended_at IS NULL;
-- Handlers running now, by worker process (see LongAttemptRunning).
CREATE INDEX attempts_running_instance ON pgtask_chaos.attempts (instance) WHERE ended_at IS NULL;

-- The handler's write through job.Tx(): it commits only with the attempt's
-- success.
CREATE TABLE pgtask_chaos.effects (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL,
    attempt  integer NOT NULL,
    instance integer NOT NULL
);

CREATE INDEX effects_job ON pgtask_chaos.effects (job_id);

-- Worker processes that were killed: by the orchestrator (sigkill, written
-- just before the signal is sent) or by a poison job (poison, written just
-- before it kills its own process). The process died at `at` or later.
CREATE TABLE pgtask_chaos.deaths (
    instance integer NOT NULL,
    pid      integer NOT NULL,
    kind     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX deaths_instance ON pgtask_chaos.deaths (instance, at);

-- Lease-mode worker processes the run stopped (SIGSTOP) for twice their
-- lease: stopped_at is written just before the signal is sent, resumed_at
-- just after SIGCONT, so the process was stopped within that span.
CREATE TABLE pgtask_chaos.pauses (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance   integer NOT NULL,
    pid        integer NOT NULL,
    stopped_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    resumed_at timestamptz
);

-- The database's restart and crash: before_at is written just before the
-- server is stopped or killed, after_at once it answers again, so the
-- server was away within that span.
CREATE TABLE pgtask_chaos.db_faults (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- restart or crash.
    kind      text NOT NULL,
    before_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    after_at  timestamptz
);

-- When an attempt's handler is taken to have ended, for the checks of
-- overlaps (CheckOverlaps) and of concurrency limits (CheckLimits), which
-- must agree on it: its recorded end; for one with no end (cut off by the
-- death of its process), the time its process was signalled (or its start,
-- if later), when the process was certainly alive; or, if its handler failed
-- because it could not confirm its start row (which then committed after
-- all), when that failure was recorded, in the handler's words or the
-- worker's when the job's session was lost as well: the handler returned
-- at once, and the failure was recorded after that (an abandoned handler's
-- failure says it timed out). NULL: no end, and its process was not killed.
CREATE FUNCTION pgtask_chaos.attempt_end(p_job bigint, p_attempt integer, p_instance integer,
                                         p_started timestamptz, p_ended timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_ended IS NOT NULL THEN p_ended
                ELSE coalesce(
                    (SELECT min((x->>'at')::timestamptz) FROM pgtask.jobs j, jsonb_array_elements(j.errors) x
                      WHERE j.id = p_job AND (x->>'attempt')::integer = p_attempt
                        AND (x->>'error' LIKE '%chaos: start not recorded%'
                             OR x->>'error' LIKE 'worker lost its database session during the attempt, so its writes were rolled back%'
                             OR x->>'error' LIKE 'recording the attempt failed, so its writes were rolled back%')),
                    greatest(p_started, (SELECT min(d.at) FROM pgtask_chaos.deaths d WHERE d.instance = p_instance)))
           END
$$;

-- When the first error entry of a job's attempt whose text is LIKE p_pattern
-- was recorded; NULL for none. 'lease expired%': the attempt was taken over
-- after its lease ran out (expire_leases); 'worker lost%': its session was
-- lost.
CREATE FUNCTION pgtask_chaos.attempt_error_at(p_job bigint, p_attempt integer, p_pattern text) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min((x->>'at')::timestamptz) FROM pgtask.jobs j, jsonb_array_elements(j.errors) x
     WHERE j.id = p_job AND (x->>'attempt')::integer = p_attempt AND x->>'error' LIKE p_pattern
$$;

-- The attempts of limited jobs as spans of time over which each counts
-- against its key's limit, twice (sweep): 'slot' until its handler ended
-- (attempt_end) or its attempt was taken over after its lease expired,
-- whichever came first: from the takeover on, the job's slot belongs to its
-- next attempt, as the group's turn does in CheckOverlaps; 'handler' until
-- its handler ended, taken over or not. An attempt whose handler never
-- ended, and whose process was not killed, runs until the end of time
-- (CheckOverlaps reports it too).
CREATE VIEW pgtask_chaos.limit_spans AS
    WITH a AS (
        SELECT t.id, t.job_id, t.attempt, t.instance, t.mode, e.limit_key, e.limit_max, t.started_at,
               pgtask_chaos.attempt_end(t.job_id, t.attempt, t.instance, t.started_at, t.ended_at) AS end_at,
               pgtask_chaos.attempt_error_at(t.job_id, t.attempt, 'lease expired%') AS taken_at,
               pgtask_chaos.attempt_error_at(t.job_id, t.attempt, 'worker lost%') IS NOT NULL AS lost
          FROM pgtask_chaos.attempts t JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id
         WHERE e.limit_max IS NOT NULL
    )
    SELECT 'slot'::text AS sweep, a.id, a.job_id, a.attempt, a.instance, a.mode, a.limit_key, a.limit_max, a.started_at,
           coalesce(least(a.end_at, a.taken_at), 'infinity')::timestamptz AS until, a.lost, a.taken_at IS NOT NULL AS taken
      FROM a
    UNION ALL
    SELECT 'handler'::text, a.id, a.job_id, a.attempt, a.instance, a.mode, a.limit_key, a.limit_max, a.started_at,
           coalesce(a.end_at, 'infinity')::timestamptz, a.lost, a.taken_at IS NOT NULL
      FROM a;

-- Each start of a limited attempt (one row per sweep of limit_spans) with
-- how many attempts of its key were running right after it: the spans'
-- starts and ends taken in time order, an end before a start at the same
-- instant (one attempt may start as another ends, as in CheckOverlaps).
CREATE VIEW pgtask_chaos.limit_running AS
    WITH s AS (
        SELECT s.sweep, s.id, s.limit_key, s.limit_max, s.started_at, s.until
          FROM pgtask_chaos.limit_spans s WHERE s.until > s.started_at
    ), events AS (
        SELECT s.sweep, s.id, s.limit_key, s.limit_max, s.started_at AS at, 1 AS delta FROM s
        UNION ALL
        SELECT s.sweep, s.id, s.limit_key, s.limit_max, s.until, -1 FROM s
    ), counted AS (
        SELECT ev.sweep, ev.id, ev.limit_key, ev.limit_max, ev.at, ev.delta,
               sum(ev.delta) OVER (PARTITION BY ev.sweep, ev.limit_key ORDER BY ev.at, ev.delta, ev.id
                                   ROWS UNBOUNDED PRECEDING) AS running
          FROM events ev
    )
    SELECT c.sweep, c.id, c.limit_key, c.limit_max, c.at, c.running::bigint AS running FROM counted c WHERE c.delta = 1;

-- Records, in the transaction that marks a workflow cancelled, that
-- transaction's id, the time and its session (see
-- pgtask_chaos.workflow_cancels).
CREATE FUNCTION pgtask_chaos.note_workflow_cancel() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgtask_chaos.workflow_cancels (workflow_id, xid)
    VALUES (NEW.id, pg_current_xact_id()::xid)
        ON CONFLICT (workflow_id) DO NOTHING;
    RETURN NULL;
END;
$$;

CREATE TRIGGER chaos_workflow_cancelled
    AFTER UPDATE ON pgtask.workflows
    FOR EACH ROW
    WHEN (OLD.cancelled_at IS NULL AND NEW.cancelled_at IS NOT NULL)
    EXECUTE FUNCTION pgtask_chaos.note_workflow_cancel();

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
    -- poison, long.
    behavior  text NOT NULL,
    -- batch (EnqueueMany) or single (Enqueue).
    how       text NOT NULL
);

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

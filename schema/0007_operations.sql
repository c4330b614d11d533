-- Cluster-wide duties and operations: a leader among the workers, paused
-- queues, and the index retention deletes finished jobs by.

-- One row per cluster-wide duty: the worker process that performs it, until
-- when its claim to it holds unless renewed. See functions/operations.sql.
CREATE TABLE pgtask.leaders (
    duty       text COLLATE "C" PRIMARY KEY,
    worker_id  integer NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL
);

-- Queues no worker claims from until they are resumed. Jobs already running
-- finish; enqueueing goes on.
CREATE TABLE pgtask.paused_queues (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT paused_queues_queue_bounded CHECK (queue <> '' AND octet_length(queue) <= 128)
);

-- Finished jobs by status and age, oldest first: retention deletes those
-- past their status's age in batches, at a cost that does not grow with the
-- jobs it keeps.
CREATE INDEX jobs_finished ON pgtask.jobs (status, finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');

-- The ticks of periodic jobs that were enqueued: a tick's row is inserted in
-- the transaction that enqueues its job, so a tick gets one job, whichever
-- worker schedules it and however many try at once.
CREATE TABLE pgtask.periodic_ticks (
    name        text COLLATE "C" NOT NULL,
    tick_at     timestamptz NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, tick_at)
);

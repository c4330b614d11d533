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

-- Unique jobs. unique_key is the job's kind and key (and, for a key with a
-- window, the window it was enqueued in); unique_statuses are the statuses
-- in which the job holds its key: always the unfinished ones, and those of
-- the finished ones the caller chose. The unique index holds a job only
-- while its status is one of them, so a job that leaves them frees its key.
-- unique_until is the end of a windowed key's window: until then retention
-- leaves a finished job that holds its key.
--
-- The constraint is NOT VALID: the new column is empty, and validating it
-- would scan the table under the migration's lock.
ALTER TABLE pgtask.jobs
    ADD COLUMN unique_key text COLLATE "C",
    ADD COLUMN unique_statuses pgtask.job_status[],
    ADD COLUMN unique_until timestamptz,
    ADD CONSTRAINT jobs_unique_key_bounded CHECK (octet_length(unique_key) <= 1300) NOT VALID;

CREATE UNIQUE INDEX jobs_unique ON pgtask.jobs (unique_key)
    WHERE status = ANY (unique_statuses);

-- The advisory lock class of unique keys and periodic ticks ('pgtu'): an
-- enqueue of a new unique job holds (class, hash of its key) until it
-- commits, so that concurrent enqueues of one key find each other's job
-- rather than the index's error; taking a periodic job's tick holds (class,
-- hash of its name).
--
-- The advisory lock class of paused queues ('pgtp'): a claim holds (class,
-- hash of its queue) shared until it commits, and pausing the queue takes
-- it exclusively, so a pause waits for the claims already past its check.
CREATE FUNCTION pgtask.unique_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828213 $$;

CREATE FUNCTION pgtask.pause_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828208 $$;

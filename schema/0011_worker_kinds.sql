-- The kinds each worker process has handlers for, in each queue it serves,
-- recorded when it starts (pgtask.record_worker_kinds). A worker claims
-- only the kinds it handles, so a runnable job of a kind no live worker
-- handles waits without a word; with these rows an operator can see it
-- (`pgtask stats`, runtime.UnhandledKinds). The rows of a worker that is
-- gone (its worker lock is free) are ignored, and deleted by the next
-- worker that records its own.
CREATE TABLE pgtask.worker_kinds (
    worker_id   integer NOT NULL,
    queue       text COLLATE "C" NOT NULL,
    kind        text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, queue, kind)
);

-- The claims take the kinds the worker handles (functions/work.sql): their
-- forms without them go.
DROP FUNCTION IF EXISTS pgtask.claim_jobs_v4(text, integer, integer, smallint, bigint, bigint);
DROP FUNCTION IF EXISTS pgtask.claim_leased_jobs_v3(text, integer, integer, bigint, smallint, bigint, bigint, integer);
DROP FUNCTION IF EXISTS pgtask.pick_heads(text, integer, smallint, bigint);
DROP FUNCTION IF EXISTS pgtask.pick_runs(bigint[], integer, integer);

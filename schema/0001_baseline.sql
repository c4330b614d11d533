-- The baseline: pgtask's types, tables, indexes and triggers, and the few
-- functions that must never change in place. pgtask's other functions live
-- in schema/functions/, one current file per topic, applied after the
-- migrations (see runtime.Migrate); roles get their privileges from
-- pgtask.grant_roles (functions/roles.sql). Later migrations append to this
-- one and never change it (see README.md in this folder).
--
-- Jobs and their groups.
--
-- A job's life: scheduled (waiting for run_after) -> queued (runnable) ->
-- started (claimed; attempts already counted and committed) -> succeeded,
-- or back to scheduled/queued for a retry, or failed; cancelled by an operator.
--
-- Grouped jobs run one at a time per (queue, group_key), in id order. Only a
-- group's head (is_head) may be claimed. A head that finishes stays marked
-- until its group is advanced: the next pending job becomes the head, or the
-- group's row goes away. Group rows are locked like this:
--   - enqueueing takes a shared lock (FOR KEY SHARE) on an existing group's
--     row, or inserts the row, and keeps it until its transaction commits;
--     enqueuers never wait for each other on an existing group;
--   - advancing takes the row exclusively, but only with SKIP LOCKED: a group
--     with an enqueue in flight is left for a moment later, since its new job
--     is not visible yet. Advancing never waits for a lock held by someone who
--     might wait for it, so enqueueing and working cannot deadlock.

CREATE TYPE pgtask.job_status AS ENUM (
    'scheduled', 'queued', 'started', 'succeeded', 'failed', 'cancelled'
);

-- Which revision of each function file the database runs. A worker applies
-- a file only when its own copy has a higher revision, so an older worker
-- starting during a rolling deploy never puts older bodies back.
CREATE TABLE pgtask.function_files (
    name       text PRIMARY KEY,
    revision   integer NOT NULL CHECK (revision >= 1),
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The predicates that decide which jobs an index holds. Each has one home
-- here, used both by its index and by the queries that must match the index
-- (IMMUTABLE SQL functions are inlined by the planner, in the index's
-- predicate and in a query alike, so the two are proven equal). Replacing
-- one in place would silently make its indexes wrong: a change is a new
-- function and new indexes, in a new migration.

-- A job that still has to run: waiting for its time, runnable, or running.
-- A group's unfinished jobs. The jobs_workflow_* triggers spell its set of
-- statuses out as an array constant (see them below).
CREATE FUNCTION pgtask.job_pending(status pgtask.job_status) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status IN ('scheduled', 'queued', 'started') $$;

-- A job that failed for good and stops its group until an operator retries
-- or cancels it.
CREATE FUNCTION pgtask.job_blocks_group(status pgtask.job_status, fail_blocks_group boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status = 'failed' AND fail_blocks_group $$;

-- A job that is finished in a way that lets its group move on to its next
-- job. A head for which this holds is waiting for its group to be advanced.
CREATE FUNCTION pgtask.job_releases_group(status pgtask.job_status, fail_blocks_group boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status IN ('succeeded', 'cancelled') OR (status = 'failed' AND NOT fail_blocks_group) $$;

-- The advisory lock classes. Live workers hold locks of these classes, so
-- they never change.
--
-- Worker locks ('pgta'): every session of a worker process holds (class,
-- worker id) shared while it lives, and a rescuer that can take it
-- exclusively knows the process is gone.
CREATE FUNCTION pgtask.worker_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828193 $$;

-- Unique keys and periodic ticks ('pgtu'): an enqueue of a new unique job
-- holds (class, hash of its key) until it commits, so that concurrent
-- enqueues of one key find each other's job rather than the index's error;
-- taking a periodic job's tick holds (class, hash of its name).
CREATE FUNCTION pgtask.unique_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828213 $$;

-- Paused queues ('pgtp'): a claim holds (class, hash of its queue) shared
-- until it commits, and pausing the queue takes it exclusively, so a pause
-- waits for the claims already past its check.
CREATE FUNCTION pgtask.pause_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828208 $$;

-- Wake-ups (see pgtask.enqueue_jobs and runtime/listen.go). Idle runners
-- ('pgti'): while some runner of a queue waits for a notification, its
-- worker's listening session holds (class, hash of the queue) shared, for
-- as long as it lives. Enqueues in flight ('pgte'): an enqueue that makes a
-- job of a queue runnable holds (class, hash of the queue) shared until it
-- commits, and notifies only if it finds the queue's idle lock held; a
-- listener that has just taken the idle lock has a runner claim at once,
-- and again each time some of the enqueues that held theirs before it
-- (pg_locks shows them) are done.
CREATE FUNCTION pgtask.idle_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828201 $$;

CREATE FUNCTION pgtask.enqueue_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1885828197 $$;

CREATE TABLE pgtask.jobs (
    id                bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    -- Keys compare bytewise ("C"): cheaper in every index and sort, and their
    -- order only has to be consistent, not linguistic.
    queue             text COLLATE "C" NOT NULL,
    kind              text COLLATE "C" NOT NULL,
    group_key         text COLLATE "C",
    -- The id of the group's row (queue_groups.id) when the job was enqueued or
    -- last retried. A group's row outlives its unfinished jobs, so all of them
    -- carry the current row's id: the group index is keyed by it.
    group_id          bigint,
    -- True for every ungrouped job and for the one job of a group that may run next.
    is_head           boolean NOT NULL,
    status            pgtask.job_status NOT NULL,
    priority          smallint NOT NULL DEFAULT 0,
    -- Priority aging (see age_priorities in functions/maintenance.sql): a
    -- queued job whose priority is above 0 gets one level better (lower)
    -- each aging_ms it waits, until it reaches 0; age_due is when it gets
    -- the next, NULL when it gets none (aging_ms 0, or priority 0 or better).
    aging_ms          integer NOT NULL DEFAULT 0,
    age_due           timestamptz,
    payload           jsonb NOT NULL,
    result            jsonb,
    -- One object per failed attempt: {"attempt": n, "error": text, "at": time, ...}.
    errors            jsonb NOT NULL DEFAULT '[]',
    attempts          integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL,
    -- A final failure of this job blocks its group until an operator retries or cancels it.
    fail_blocks_group boolean NOT NULL DEFAULT false,
    run_after         timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    -- The backend whose session claimed the job; while it lives the job is not an orphan.
    owner_pid         integer,
    -- The worker process that claimed the job (see rescue_orphans).
    worker_id         integer,
    -- A token that a worker gives each claim it sends together with the
    -- commit and the next job transaction's begin, so that transaction can
    -- lock what the claim took without being told the ids (see
    -- hold_claimed_jobs in functions/work.sql): the claim, its commit, the
    -- begin and the lock go in one round trip. Each claim has its own token,
    -- so the lookup finds its jobs only, even while a long transaction
    -- elsewhere keeps the index entries of earlier claims from being cleaned
    -- up.
    claim_token       bigint,
    -- Lease mode (see functions/work.sql): a job claimed with a lease is held
    -- by no session. lease_until says until when its worker answers for it:
    -- its heartbeat moves it on while the handler runs, and once it has
    -- passed, another worker takes the job over. NULL for a job claimed in
    -- the held-transaction mode, whose session's row lock answers for it.
    -- Not indexed, so the heartbeat's updates stay HOT.
    lease_until       timestamptz,
    -- Outcomes a worker sent for an attempt that was no longer the job's
    -- current one (it was taken over, or settled already): refused, never
    -- recorded.
    stale_outcomes    integer NOT NULL DEFAULT 0,
    -- How often the job snoozed (runtime.Snooze): ran and asked to run
    -- again later, with its attempt given back and no error recorded. A
    -- snooze past its kind's cap fails the job, and is counted too. An
    -- operator's retry sets it back to 0.
    snoozes           integer NOT NULL DEFAULT 0,
    -- Unique jobs. unique_key is the job's kind and key (and, for a key with
    -- a window, the window it was enqueued in); unique_statuses are the
    -- statuses in which the job holds its key: always the unfinished ones,
    -- and those of the finished ones the caller chose. The unique index
    -- holds a job only while its status is one of them, so a job that leaves
    -- them frees its key. unique_until is the end of a windowed key's
    -- window: until then retention leaves a finished job that holds its key.
    unique_key        text COLLATE "C",
    unique_statuses   pgtask.job_status[],
    unique_until      timestamptz,
    -- Metadata: string keys and values the application attaches at enqueue
    -- (a trace context, a tenant, a request id) and reads in the handler,
    -- kept apart from the payload that the task's type declares. NULL for
    -- none.
    metadata          jsonb,
    -- The login that enqueued each job. The enqueue functions run as their
    -- owner (SECURITY DEFINER), so current_user there is the owner;
    -- session_user is still the role the session logged in as, which the
    -- caller cannot change (only a superuser can SET SESSION AUTHORIZATION),
    -- and a SET ROLE does not change it. A producer that may read only its
    -- own jobs sees the rows whose enqueued_by is its session's user (a
    -- row-level security policy that pgtask.grant_roles creates).
    enqueued_by       text COLLATE "C" DEFAULT session_user,
    -- The batch the job belongs to (pgtask.batches), NULL for none.
    batch_id          bigint,
    -- The concurrency limit the job counts against (pgtask.limit_keys.id),
    -- NULL for none. A limited job runs only while admitted: is_head marks
    -- it, as it marks a group's head, so the claim index holds admitted
    -- jobs only and a key at its limit costs a claim nothing. See
    -- functions/limits.sql.
    limit_id          bigint,
    -- The rate limit the job counts against (pgtask.rate_keys.id), NULL for
    -- none. A rate-limited job is never a head (is_head false): it waits in
    -- an index of its own (jobs_rate_waiting), and a claim takes it with a
    -- token of its key. See functions/rates.sql.
    rate_id           bigint,
    -- Fair queues (see functions/fair.sql): the job's tenant ('' when its
    -- enqueue named none) and its turn among the queue's tenants, NULL for
    -- a job of a queue that is not fair. Claims of a fair queue take heads
    -- by (priority, fair_seq, id).
    tenant            text COLLATE "C",
    fair_seq          bigint,
    -- The workflow the job is a step of (pgtask.workflows), NULL for none.
    -- A step with parents is enqueued parked (see pgtask.parked_at) and
    -- released when they allow it (see functions/workflows.sql).
    workflow_id       bigint,
    CONSTRAINT jobs_queue_not_empty CHECK (queue <> ''),
    CONSTRAINT jobs_kind_not_empty CHECK (kind <> ''),
    CONSTRAINT jobs_group_key_not_empty CHECK (group_key <> ''),
    CONSTRAINT jobs_group_complete CHECK ((group_key IS NULL) = (group_id IS NULL)),
    -- A group is its own limit (one job at a time); a grouped job has no other.
    CONSTRAINT jobs_limit_ungrouped CHECK (limit_id IS NULL OR group_key IS NULL),
    -- A rate-limited job has no group and no concurrency limit.
    CONSTRAINT jobs_rate_alone CHECK (rate_id IS NULL OR (group_key IS NULL AND limit_id IS NULL)),
    CONSTRAINT jobs_attempts_valid CHECK (attempts >= 0),
    CONSTRAINT jobs_max_attempts_valid CHECK (max_attempts >= 1),
    CONSTRAINT jobs_snoozes_valid CHECK (snoozes >= 0),
    CONSTRAINT jobs_aging_valid CHECK (aging_ms >= 0),
    CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) IN ('object', 'array')),
    CONSTRAINT jobs_errors_array CHECK (jsonb_typeof(errors) = 'array'),
    -- Queue names, kinds and group keys enter the claim and group indexes,
    -- whose rows PostgreSQL limits to about 2.7 kB. These bounds match
    -- runtime.MaxQueueBytes, MaxKindBytes and MaxGroupKeyBytes.
    CONSTRAINT jobs_queue_bounded CHECK (octet_length(queue) <= 128),
    CONSTRAINT jobs_kind_bounded CHECK (octet_length(kind) <= 128),
    CONSTRAINT jobs_group_key_bounded CHECK (octet_length(group_key) <= 1024),
    CONSTRAINT jobs_unique_key_bounded CHECK (octet_length(unique_key) <= 1300),
    CONSTRAINT jobs_metadata_object CHECK (jsonb_typeof(metadata) = 'object'),
    CONSTRAINT jobs_fair_complete CHECK ((tenant IS NULL) = (fair_seq IS NULL)),
    -- Matches runtime.MaxTenantBytes.
    CONSTRAINT jobs_tenant_bounded CHECK (octet_length(tenant) <= 1024)
);

-- The claim index holds only runnable heads: its size is the number of jobs that
-- could start now, not the backlog and not the number of waiting groups.
CREATE INDEX jobs_claim ON pgtask.jobs (queue, priority, id)
    WHERE status = 'queued' AND is_head;

-- The claim index of fair queues (see functions/fair.sql): their runnable
-- heads by turn. They are in jobs_claim too, which the claims of a queue
-- that is not fair read; only fair jobs pay for this one.
CREATE INDEX jobs_fair ON pgtask.jobs (queue, priority, fair_seq, id)
    WHERE status = 'queued' AND is_head AND fair_seq IS NOT NULL;

-- Each tenant's queued jobs of a fair queue by turn: an enqueue finds the
-- tenant's last turn here, and statistics count a tenant's backlog.
CREATE INDEX jobs_fair_tenant ON pgtask.jobs (queue, tenant, fair_seq)
    WHERE status = 'queued' AND fair_seq IS NOT NULL;

-- Queued heads whose priority rises as they wait, by when it next does
-- (see age_priorities), and limited and rate-limited jobs waiting for a
-- slot or a token, which their key gives by priority. Jobs at priority 0
-- or better, and those that keep their priority, are not in it.
CREATE INDEX jobs_aging ON pgtask.jobs (age_due)
    WHERE status = 'queued' AND (is_head OR limit_id IS NOT NULL OR rate_id IS NOT NULL) AND age_due IS NOT NULL;

-- Jobs waiting for their time; the scheduler moves due ones to queued.
CREATE INDEX jobs_scheduled ON pgtask.jobs (run_after)
    WHERE status = 'scheduled';

-- The started jobs, by claim token (see claim_token). Rescuing reads it
-- whole; an index of the started jobs by id beside it made the planner take
-- that one for the lock, stepping over every dead entry a long transaction
-- kept in it.
CREATE INDEX jobs_claim_token ON pgtask.jobs (claim_token, id)
    WHERE status = 'started';

-- The unfinished jobs of each group in order, to find a group's next head.
-- Started jobs are in it: a job that ran behind its head in a batch whose
-- session was lost is started until it is requeued, and keeps its place.
-- Every grouped job enters it when enqueued, each batch at as many places as
-- it has groups; integer keys make that about half as costly as text ones.
CREATE INDEX jobs_group_pending ON pgtask.jobs (group_id, id)
    WHERE group_id IS NOT NULL AND pgtask.job_pending(status);

-- Failed jobs that block their group, to find one that a run of a group's
-- jobs (see claim_jobs) left behind its head.
CREATE INDEX jobs_group_blocked ON pgtask.jobs (queue, group_key, id)
    WHERE group_key IS NOT NULL AND pgtask.job_blocks_group(status, fail_blocks_group);

-- Heads that finished and whose group has not moved on yet (normally for a
-- moment; longer when an enqueue into the group was in flight).
CREATE INDEX jobs_finished_heads ON pgtask.jobs (queue, group_key)
    WHERE is_head AND group_key IS NOT NULL AND pgtask.job_releases_group(status, fail_blocks_group);

-- Finished jobs by status and age, oldest first: retention deletes those
-- past their status's age in batches, at a cost that does not grow with the
-- jobs it keeps.
CREATE INDEX jobs_finished ON pgtask.jobs (status, finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');

CREATE UNIQUE INDEX jobs_unique ON pgtask.jobs (unique_key)
    WHERE status = ANY (unique_statuses);

-- The jobs of each batch in order: finding whether a batch still has an
-- unfinished job reads it from the batch's cursor on (see finish_batches in
-- functions/batches.sql), and a batch's counts read it once.
CREATE INDEX jobs_batch ON pgtask.jobs (batch_id, id)
    WHERE batch_id IS NOT NULL;

-- The steps of each workflow in order: a workflow's state and its page of
-- steps read it, and retention finds a workflow's jobs there.
CREATE INDEX jobs_workflow ON pgtask.jobs (workflow_id, id)
    WHERE workflow_id IS NOT NULL;

-- The failed jobs of each batch, for its on-failure callback.
CREATE INDEX jobs_batch_failed ON pgtask.jobs (batch_id)
    WHERE batch_id IS NOT NULL AND status = 'failed';

-- The limited jobs waiting for a free slot of their key, in the order they
-- are admitted (see functions/limits.sql).
CREATE INDEX jobs_limit_waiting ON pgtask.jobs (limit_id, priority, id)
    WHERE limit_id IS NOT NULL AND status = 'queued' AND NOT is_head;

-- The rate-limited jobs waiting for a token of their key, in the order
-- claims take them (see functions/rates.sql).
CREATE INDEX jobs_rate_waiting ON pgtask.jobs (rate_id, priority, id)
    WHERE rate_id IS NOT NULL AND status = 'queued';

-- The jobs a held-mode claim took in a run behind a limited key's admitted
-- job (see pick_limited_runs in functions/work.sql), by key and claim: when
-- the admitted one ends, its slot passes to the next of them. Only the runs
-- in flight are in it.
CREATE INDEX jobs_limit_runs ON pgtask.jobs (limit_id, claim_token, id)
    WHERE limit_id IS NOT NULL AND status = 'started' AND NOT is_head;

-- Batches (runtime.EnqueueBatch): jobs enqueued together, and the callback
-- jobs that run when all of them have finished (on_finish) and when the
-- first of them fails for good (on_failure). A callback is enqueued with the
-- batch, parked: scheduled to run at the end of year 9999 (see
-- pgtask.parked_at in functions/batches.sql), so that nothing promotes it,
-- until finish_batches releases it. Every worker's maintenance round looks
-- at the open batches, changes one only under its row lock taken with SKIP
-- LOCKED, and releases a callback in the same transaction that marks the
-- batch for it, only while the mark is not set: whatever number of workers
-- finish a batch's jobs at once, and whoever crashes, a callback is
-- released once.
CREATE TABLE pgtask.batches (
    id           bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    -- How many jobs the batch was enqueued with.
    total        integer NOT NULL,
    on_finish    bigint,
    on_failure   bigint,
    -- No job of the batch below this id is unfinished: the check for the
    -- batch's end reads the batch's jobs from here, and moves it to the
    -- first unfinished job it finds, so that each finished job is stepped
    -- over about once, however long the batch runs. An operator's retry
    -- of a job of an open batch moves it back to that job.
    pending_from bigint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- When the first failed job was found (and on_failure released).
    failed_at    timestamptz,
    -- When the batch ended: its counts are from then. A job gone by then
    -- (deleted) counts as deleted.
    finished_at  timestamptz,
    succeeded    integer,
    failed       integer,
    cancelled    integer,
    deleted      integer,
    enqueued_by  text COLLATE "C" DEFAULT session_user,
    CONSTRAINT batches_total_valid CHECK (total >= 1)
);

-- The batches not finished yet, which maintenance looks at each round.
CREATE INDEX batches_open ON pgtask.batches (id)
    WHERE finished_at IS NULL;

-- Ended batches by when they ended, oldest first, for retention.
CREATE INDEX batches_finished ON pgtask.batches (finished_at)
    WHERE finished_at IS NOT NULL;

-- One row per group that has unfinished work. The group's head, the job that
-- runs next (or is running, or failed and blocks the group, or has just
-- finished), is the job of the group marked is_head; the row does not name
-- it. A row changed with every job the group runs would leave a version
-- behind each time, which vacuum cannot remove while some other session
-- keeps a transaction open, and every lookup of the row (each enqueue into
-- the group and each advance of it) would step over all of them. So the row
-- is written when the group starts and when it empties, and locked in
-- between (locks change no version).
CREATE TABLE pgtask.queue_groups (
    -- A new id each time the group's row is created.
    id           bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    queue        text COLLATE "C" NOT NULL,
    group_key    text COLLATE "C" NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A lower bound on the ids of the group's pending jobs that are below
    -- its head's, NULL when there are none (the usual case). Advancing a
    -- group finds its next job as the pending job of lowest id, in the index
    -- of pending grouped jobs (group_id, id); every job that ran left
    -- entries there that stay until vacuum removes them, which it cannot
    -- while some other session keeps a transaction open, and a scan from the
    -- group's start would step over all of them. So the scan starts at the
    -- old head's id: every job enqueued after the head has a higher id. Only
    -- a retry of an older job of the group (see retry_job) and an enqueue
    -- that joins a group another created meanwhile with ids taken earlier
    -- (see enqueue_jobs) put a pending job below the head; they set this,
    -- and the advance that passes it clears it.
    pending_from bigint,
    PRIMARY KEY (queue, group_key),
    CONSTRAINT queue_groups_queue_bounded CHECK (octet_length(queue) <= 128),
    CONSTRAINT queue_groups_group_key_bounded CHECK (octet_length(group_key) <= 1024)
);

-- Groups whose head row a DELETE removed while they could not be advanced
-- at once (an enqueue or an advance held their row); maintenance moves them
-- on. See advance_after_delete in functions/groups.sql.
CREATE TABLE pgtask.stale_groups (
    queue     text COLLATE "C" NOT NULL,
    group_key text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- The triggers that keep a DELETE or TRUNCATE of jobs from wedging a group.
-- Created here, once, since creating a trigger locks the jobs table against
-- every writer; their functions' bodies live in functions/groups.sql, which
-- replaces these placeholders in the same migration pass.
CREATE FUNCTION pgtask.advance_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE FUNCTION pgtask.forget_groups_after_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE TRIGGER jobs_advance_after_delete
    AFTER DELETE ON pgtask.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION pgtask.advance_after_delete();

CREATE TRIGGER jobs_forget_groups_after_truncate
    AFTER TRUNCATE ON pgtask.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgtask.forget_groups_after_truncate();

-- Concurrency limits (see functions/limits.sql): one row per key that has
-- had a limited job, with its limit and how many of its slots are free.
-- Jobs admitted (is_head) and free slots add up to max_running. A claim
-- takes slots from the row as it admits waiting jobs, and a batch of
-- outcomes gives its slots back to it once per key; a key that has free
-- slots and jobs waiting is ready, in limit_keys_ready, where claims find
-- it.
CREATE TABLE pgtask.limit_keys (
    id          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    queue       text COLLATE "C" NOT NULL,
    -- '' for the queue's own limit.
    limit_key   text COLLATE "C" NOT NULL,
    -- The limit the tasks declared (the latest enqueue's), and the one in
    -- force: an operator's override (pgtask.limit_overrides), else declared.
    declared    integer NOT NULL,
    max_running integer NOT NULL,
    -- Below 0 after a limit was lowered under the jobs already admitted:
    -- slots given back fill it first.
    free        integer NOT NULL,
    -- Whether jobs of the key may be waiting for a slot: set by whoever
    -- makes one wait, cleared by a claim that finds none left.
    waiting     boolean NOT NULL DEFAULT false,
    -- When the key last became ready or gave a claim jobs: claims take
    -- ready keys in this order, so each key's turn comes round.
    ready_since timestamptz NOT NULL DEFAULT now(),
    -- The (priority, id) of the last job a claim took from the key, NULL
    -- for none: its next claim looks for waiting jobs after it (see
    -- pick_admitted).
    frontier_priority smallint,
    frontier_id       bigint,
    PRIMARY KEY (queue, limit_key),
    CONSTRAINT limit_keys_declared_valid CHECK (declared >= 1),
    CONSTRAINT limit_keys_max_valid CHECK (max_running >= 1),
    CONSTRAINT limit_keys_free_valid CHECK (free <= max_running),
    CONSTRAINT limit_keys_queue_bounded CHECK (octet_length(queue) <= 128),
    CONSTRAINT limit_keys_key_bounded CHECK (octet_length(limit_key) <= 1024)
);

-- The keys whose waiting jobs a claim may admit now: free slots, jobs
-- waiting. Keys at their limit are not in it, so a claim never reads them.
CREATE INDEX limit_keys_ready ON pgtask.limit_keys (queue, ready_since, id)
    WHERE waiting AND free > 0;

-- Limits an operator set, which win over the declared ones: for one key of
-- a queue, or (limit_key NULL) for every key of it but the queue's own ('').
CREATE TABLE pgtask.limit_overrides (
    queue       text COLLATE "C" NOT NULL,
    limit_key   text COLLATE "C",
    max_running integer NOT NULL,
    set_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT limit_overrides_unique UNIQUE NULLS NOT DISTINCT (queue, limit_key),
    CONSTRAINT limit_overrides_max_valid CHECK (max_running >= 1)
);

-- Keys to look at again, left by whoever could not take the key's row lock
-- without waiting (it was held by another enqueue or finisher): an enqueue
-- that left jobs waiting, a finished job's slot to give back (released), a
-- changed declared limit. Every worker's maintenance round applies them
-- under the key's lock, then admits waiting jobs into free slots.
CREATE TABLE pgtask.limit_checks (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id   bigint NOT NULL,
    released integer NOT NULL DEFAULT 0,
    declared integer
);
CREATE INDEX limit_checks_key ON pgtask.limit_checks (key_id);

-- The triggers that keep the slots of limited jobs counted whatever changes
-- a job (see functions/limits.sql, which replaces these placeholders). A
-- limited job holds a slot only while admitted and queued or started; the
-- BEFORE trigger unmarks one that leaves those, and the AFTER triggers
-- hand its slot on or give it back. Their WHEN clauses keep every other
-- job's updates free of them.
CREATE FUNCTION pgtask.limit_unadmit() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$;

CREATE FUNCTION pgtask.limit_release() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE FUNCTION pgtask.limit_waits() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE TRIGGER jobs_limit_unadmit
    BEFORE UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (NEW.limit_id IS NOT NULL AND NEW.is_head AND NEW.status <> ALL ('{queued,started}'::pgtask.job_status[]))
    EXECUTE FUNCTION pgtask.limit_unadmit();

CREATE TRIGGER jobs_limit_release
    AFTER UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.limit_id IS NOT NULL AND OLD.is_head AND OLD.status = ANY ('{queued,started}'::pgtask.job_status[])
          AND NOT (NEW.is_head AND NEW.status = ANY ('{queued,started}'::pgtask.job_status[])))
    EXECUTE FUNCTION pgtask.limit_release();

CREATE TRIGGER jobs_limit_release_deleted
    AFTER DELETE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.limit_id IS NOT NULL AND OLD.is_head AND OLD.status = ANY ('{queued,started}'::pgtask.job_status[]))
    EXECUTE FUNCTION pgtask.limit_release();

-- A limited job that comes to wait (a delayed job or a retry made due, a
-- job handed back or rescued from a run, an operator's retry) marks its
-- key waiting.
CREATE TRIGGER jobs_limit_waits
    AFTER UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (NEW.limit_id IS NOT NULL AND NEW.status = 'queued' AND NOT NEW.is_head
          AND (OLD.status <> 'queued' OR OLD.is_head))
    EXECUTE FUNCTION pgtask.limit_waits();

-- Rate limits (see functions/rates.sql): one row per key that has had a
-- rate-limited job, a token bucket: rate tokens per period_us, at most
-- burst of them kept, tokens as of refilled_at (refilled lazily by the
-- claims that take them). ready_at is when the key's next token is due
-- while it has jobs waiting, NULL while it has none: claims find the keys
-- they may take from in rate_keys_ready, and workers sleep until the first
-- ready_at of their queues.
CREATE TABLE pgtask.rate_keys (
    id                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    queue              text COLLATE "C" NOT NULL,
    -- '' for the queue's own rate.
    rate_key           text COLLATE "C" NOT NULL,
    -- The rate the tasks declared (the latest enqueue's that held the row),
    -- and the one in force: an operator's override (rate_overrides), else
    -- the declared one.
    declared_rate      integer NOT NULL,
    declared_period_us bigint NOT NULL,
    declared_burst     integer NOT NULL,
    rate               integer NOT NULL,
    period_us          bigint NOT NULL,
    burst              integer NOT NULL,
    tokens             double precision NOT NULL,
    refilled_at        timestamptz NOT NULL,
    ready_at           timestamptz,
    -- The (priority, id) of the last job a claim took, NULL for none: no
    -- job of the key waits before it, or the key's next claim looks from
    -- its start (see pick_rated).
    frontier_priority  smallint,
    frontier_id        bigint,
    PRIMARY KEY (queue, rate_key),
    CONSTRAINT rate_keys_declared_valid CHECK (declared_rate >= 1 AND declared_period_us >= 1000 AND declared_burst >= 1),
    CONSTRAINT rate_keys_valid CHECK (rate >= 1 AND period_us >= 1000 AND burst >= 1),
    CONSTRAINT rate_keys_tokens_valid CHECK (tokens >= 0 AND tokens <= burst),
    CONSTRAINT rate_keys_queue_bounded CHECK (octet_length(queue) <= 128),
    CONSTRAINT rate_keys_key_bounded CHECK (octet_length(rate_key) <= 1024)
);
CREATE INDEX rate_keys_ready ON pgtask.rate_keys (queue, ready_at)
    WHERE ready_at IS NOT NULL;

-- Rates an operator set for a key of a queue, which win over the declared
-- ones.
CREATE TABLE pgtask.rate_overrides (
    queue     text COLLATE "C" NOT NULL,
    rate_key  text COLLATE "C" NOT NULL,
    rate      integer NOT NULL,
    period_us bigint NOT NULL,
    burst     integer NOT NULL,
    set_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, rate_key),
    CONSTRAINT rate_overrides_valid CHECK (rate >= 1 AND period_us >= 1000 AND burst >= 1)
);

-- Keys to look at again, left by whoever made a job of the key wait while
-- another held the key's row: every worker's maintenance round marks such
-- a key ready (ready_at) if jobs wait on it.
CREATE TABLE pgtask.rate_checks (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id bigint NOT NULL
);
CREATE INDEX rate_checks_key ON pgtask.rate_checks (key_id);

-- The triggers that keep rate-limited jobs out of the claim index and
-- their keys ready whatever changes a job (see functions/rates.sql, which
-- replaces these placeholders): one that would become a head does not,
-- and one that comes to wait (a retry, a promotion, a hand-back, a rescue)
-- marks its key ready. Their WHEN clauses keep every other job's updates
-- free of them.
CREATE FUNCTION pgtask.rate_unhead() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$;

CREATE FUNCTION pgtask.rate_waits() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE TRIGGER jobs_rate_unhead
    BEFORE UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (NEW.rate_id IS NOT NULL AND NEW.is_head)
    EXECUTE FUNCTION pgtask.rate_unhead();

CREATE TRIGGER jobs_rate_waits
    AFTER UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (NEW.rate_id IS NOT NULL AND NEW.status = 'queued' AND OLD.status <> 'queued')
    EXECUTE FUNCTION pgtask.rate_waits();
-- Fair queues (see functions/fair.sql): one row per queue whose tenants take
-- turns. clock is a floor for the turns of new jobs: the turn the queue's
-- claims had reached at the last maintenance round that looked. It is
-- written by maintenance only (SKIP LOCKED), and enqueues only read it.
CREATE TABLE pgtask.fair_queues (
    queue       text COLLATE "C" PRIMARY KEY,
    clock       bigint NOT NULL DEFAULT 0,
    declared_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT fair_queues_queue_bounded CHECK (queue <> '' AND octet_length(queue) <= 128)
);

-- Tenants' weights that an operator set (default 1): a tenant of weight w
-- gets w turns for another's one.
CREATE TABLE pgtask.fair_weights (
    queue  text COLLATE "C" NOT NULL,
    tenant text COLLATE "C" NOT NULL,
    weight integer NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant),
    CONSTRAINT fair_weights_weight_valid CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT fair_weights_queue_bounded CHECK (octet_length(queue) <= 128),
    CONSTRAINT fair_weights_tenant_bounded CHECK (octet_length(tenant) <= 1024)
);

-- Cluster-wide duties and operations: a leader among the workers, paused
-- queues, periodic jobs' ticks, cancel requests, and the kinds each worker
-- handles.

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

-- The ticks of periodic jobs that were enqueued: a tick's row is inserted in
-- the transaction that enqueues its job, so a tick gets one job, whichever
-- worker schedules it and however many try at once.
CREATE TABLE pgtask.periodic_ticks (
    name        text COLLATE "C" NOT NULL,
    tick_at     timestamptz NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, tick_at)
);

-- A request to cancel a running attempt. A held-mode job's row is locked by
-- its worker for the whole attempt, so the request cannot be written there
-- without waiting for the attempt to end: it gets a row of its own (and no
-- foreign key, whose check would wait for that lock too). The worker
-- running the attempt cancels its handler's context; when the attempt then
-- fails, or its worker is lost, the job ends cancelled instead of being
-- retried (see fail_job). Requests whose attempt is over are pruned.
CREATE TABLE pgtask.cancel_requests (
    job_id       bigint PRIMARY KEY,
    attempt      integer NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- Why, for the attempt's error: 'operator' (an operator cancelled the
    -- job), 'workflow' (an operator cancelled its workflow) or 'step:N'
    -- (its workflow was cancelled when its step N, from 0, failed).
    cause        text NOT NULL DEFAULT 'operator',
    CONSTRAINT cancel_requests_cause_valid CHECK (cause IN ('operator', 'workflow') OR cause ~ '^step:[0-9]+$')
);

-- A job a claim just started, as the claim's UPDATE returns it: what
-- pgtask.cancel_claimed takes from each of the claims (functions/work.sql).
CREATE TYPE pgtask.claimed_job AS (
    id bigint, queue text, kind text, group_key text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fail_blocks_group boolean, created_at timestamptz,
    run_after timestamptz, metadata jsonb, scanned boolean, snoozes integer, workflow_id bigint
);

-- The roles pgtask.grant_roles last gave pgtask's privileges to, so that a
-- migration applying newer function files gives them their privileges on
-- functions those add (see pgtask.regrant_roles). One row at most.
CREATE TABLE pgtask.granted_roles (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    producer      text,
    worker        text,
    admin         text,
    own_jobs_only boolean NOT NULL,
    granted_at    timestamptz NOT NULL DEFAULT now()
);

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

-- The progress a running attempt reported (runtime.Job.ReportProgress), one
-- row per job that reported any. It is written from a connection of the
-- worker's pool, not in the job's transaction, so other sessions see it at
-- once; a held-mode job's row is locked by its attempt for the whole
-- handler, so the progress cannot live there (and has no foreign key, whose
-- check would wait for that lock). It is apart from the jobs row for bloat
-- too: a report rewrites a row, and while some session keeps a transaction
-- open vacuum can remove none of the versions left behind; a small row with
-- no index but its key leaves small versions, where the jobs row is large
-- and in many indexes. The worker writes a job's row at most every
-- quarter second. The row stays when the attempt ends, so a finished job
-- shows where it got; attempt says which attempt reported it, and a write
-- of an earlier attempt never replaces a later one's. An operator's retry,
-- whose attempts count from 1 again, deletes it (retry_job). The statement
-- trigger that advances groups after a DELETE of jobs deletes their
-- progress (functions/groups.sql), and TRUNCATE empties it.
CREATE TABLE pgtask.job_progress (
    job_id     bigint PRIMARY KEY,
    attempt    integer NOT NULL,
    -- How far the attempt has got, from 0 to 100.
    percent    double precision NOT NULL,
    message    text NOT NULL DEFAULT '',
    -- A JSON value the handler reported beside them, or NULL.
    value      jsonb,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_progress_attempt_valid CHECK (attempt >= 1),
    CONSTRAINT job_progress_percent_valid CHECK (percent >= 0 AND percent <= 100),
    -- The bound matches runtime.MaxProgressMessageBytes; the runtime bounds
    -- the value (runtime.MaxProgressBytes).
    CONSTRAINT job_progress_message_bounded CHECK (octet_length(message) <= 1024)
);

-- Workflows (runtime.Workflow, see functions/workflows.sql): jobs enqueued
-- together with dependencies between them. A step with parents is enqueued
-- parked (scheduled until the end of year 9999, like a batch's callback), so
-- it is in no claim index and costs claims nothing while it waits; the
-- transaction that records its last parent's success releases it.
CREATE TABLE pgtask.workflows (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL,
    -- How many steps it was enqueued with, and how many dependencies.
    steps        integer NOT NULL,
    edges        integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- When a failure whose dependency said so (or an operator) cancelled
    -- the whole workflow: its unfinished steps are cancelled, and none is
    -- released any more.
    cancelled_at timestamptz,
    -- The step (its place, from 0) whose failure cancelled it, under a
    -- dependency that said so; NULL when an operator cancelled it.
    cancelled_by_step integer,
    -- Set with cancelled_at while some of its steps could not be cancelled
    -- at once (their rows were locked): maintenance cancels them.
    cancel_pending boolean NOT NULL DEFAULT false,
    enqueued_by  text COLLATE "C" DEFAULT session_user,
    CONSTRAINT workflows_name_bounded CHECK (octet_length(name) <= 128),
    CONSTRAINT workflows_steps_valid CHECK (steps >= 1)
);

-- The cancelled workflows with steps maintenance still has to cancel.
CREATE INDEX workflows_cancel_pending ON pgtask.workflows (id)
    WHERE cancel_pending;

-- One row per dependency: child runs after parent. policy says what a
-- parent's failure for good (or its cancel, or its delete) does to the
-- child: 'c' cancels it (the default), 'a' lets it run anyway, 'w' cancels
-- the whole workflow. step is the parent's place in its workflow (from 0),
-- which the child's typed inputs name. outcome is what the child was told
-- of its parent: NULL nothing yet, 's' it succeeded, 'f' it failed for good,
-- was cancelled or deleted. Only the parent's finisher writes its edges'
-- outcome (under the child's waits row lock, or through a note), so
-- finishers of one child's parents write rows of their own.
-- Each edge is written once more after its insert (its outcome), and a
-- waits row once per parent told: half of each page is left free (more of
-- a waits row's, which grows when a failure cancels its step), so that
-- those writes stay on the row's page and add no index entries (a cascade
-- through 10,000 steps writes all their edges and waits rows at once).
CREATE TABLE pgtask.workflow_edges (
    workflow_id bigint NOT NULL,
    parent  bigint NOT NULL,
    child   bigint NOT NULL,
    step    integer NOT NULL,
    policy  "char" NOT NULL,
    outcome "char",
    PRIMARY KEY (parent, child),
    CONSTRAINT workflow_edges_policy_valid CHECK (policy IN ('c', 'a', 'w')),
    CONSTRAINT workflow_edges_outcome_valid CHECK (outcome IN ('s', 'f'))
) WITH (fillfactor = 50);
CREATE INDEX workflow_edges_child ON pgtask.workflow_edges (child, step);

-- One row per step that has parents: how many of them it still waits for
-- (those not succeeded, nor failed under policy 'a'), and, while it is
-- cancelled because of a parent, that parent. A finisher takes this row
-- with SKIP LOCKED only, and leaves what it could not apply in
-- workflow_notes; the row is small and apart from the job's, so that the
-- many updates a fan-in gets are cheap.
CREATE TABLE pgtask.workflow_waits (
    job_id       bigint PRIMARY KEY,
    workflow_id  bigint NOT NULL,
    remaining    integer NOT NULL,
    cancelled_by bigint,
    CONSTRAINT workflow_waits_remaining_valid CHECK (remaining >= 0)
) WITH (fillfactor = 40);
CREATE INDEX workflow_waits_workflow ON pgtask.workflow_waits (workflow_id);

-- A parent's outcome its finisher could not apply to a child at once (the
-- child's waits row was locked by another finisher): applied, exactly once,
-- under that row's lock, by the finisher right after its commit (it is
-- notified on "pgtask_workflow"), by the next finisher of a parent of the
-- child, or by maintenance.
CREATE TABLE pgtask.workflow_notes (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    child   bigint NOT NULL,
    parent  bigint NOT NULL,
    outcome "char" NOT NULL
);
CREATE INDEX workflow_notes_child ON pgtask.workflow_notes (child);

-- The triggers that tell a finished step's children (see
-- functions/workflows.sql, which replaces these placeholders): a step that
-- finishes (succeeded, failed for good, cancelled) or is deleted unfinished
-- settles its edges; one an operator retries (finished to unfinished) makes
-- the children it cancelled wait again, and stays parked itself while its
-- own parents do not allow it to run. Their WHEN clauses keep every other
-- job's updates free of them, and need no planning: every statement that
-- updates jobs prepares each WHEN again, and a SQL function there (such as
-- job_pending, whose test they spell out) is inlined anew each time, its
-- body parsed, as an IN list is folded into an array each time; the
-- statuses are an array constant instead, here and in the limits' triggers.
-- The array is job_pending's set of statuses: TestWorkflowTriggersMatchJobPending
-- holds the two equal. The updates of a cascade, which tells the steps it
-- changes itself, a set at a time, leave them quiet too (pgtask.wf_quiet: a
-- built-in call, tested last), as does a batch of successes (settle_jobs),
-- which queues its steps itself; the restore after a retry, quiet, parks
-- the steps it retries itself.
CREATE FUNCTION pgtask.workflow_step_done() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE FUNCTION pgtask.workflow_step_again() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE FUNCTION pgtask.workflow_step_repark() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END; $$;

CREATE TRIGGER jobs_workflow_done
    AFTER UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL AND OLD.status = ANY ('{scheduled,queued,started}'::pgtask.job_status[])
          AND NEW.status <> ALL ('{scheduled,queued,started}'::pgtask.job_status[])
          AND current_setting('pgtask.wf_quiet', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION pgtask.workflow_step_done();

CREATE TRIGGER jobs_workflow_deleted
    AFTER DELETE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL AND OLD.status = ANY ('{scheduled,queued,started}'::pgtask.job_status[]))
    EXECUTE FUNCTION pgtask.workflow_step_done();

CREATE TRIGGER jobs_workflow_repark
    BEFORE UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL AND OLD.status <> ALL ('{scheduled,queued,started}'::pgtask.job_status[])
          AND NEW.status = ANY ('{scheduled,queued,started}'::pgtask.job_status[])
          AND current_setting('pgtask.wf_quiet', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION pgtask.workflow_step_repark();

CREATE TRIGGER jobs_workflow_again
    AFTER UPDATE ON pgtask.jobs
    FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL AND OLD.status <> ALL ('{scheduled,queued,started}'::pgtask.job_status[])
          AND NEW.status = ANY ('{scheduled,queued,started}'::pgtask.job_status[])
          AND current_setting('pgtask.wf_quiet', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION pgtask.workflow_step_again();

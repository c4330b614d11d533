-- Queries runtime's tests read the database with. The runtime never runs
-- them; they are generated into runtime/internal/testdb, away from gen.

-- name: GetJob :one
-- A job's row as stored (runtime.GetJob returns it decoded).
SELECT * FROM pgtask.jobs WHERE id = @id;

-- name: ListJobs :many
-- A queue's jobs in id order.
SELECT * FROM pgtask.jobs WHERE queue = @queue ORDER BY id;

-- name: CountJobs :many
-- Jobs per queue and status.
SELECT queue, status, count(*)::bigint AS jobs
  FROM pgtask.jobs
 GROUP BY queue, status
 ORDER BY queue, status;

-- name: GetGroup :one
-- A group's row, with its head (the job of it marked is_head, 0 for none)
-- and the transaction that wrote the row's current version.
SELECT g.id, g.queue, g.group_key, g.created_at, g.pending_from, g.xmin::text AS row_xmin,
       coalesce((SELECT j.id FROM pgtask.jobs j WHERE j.group_id = g.id AND j.is_head ORDER BY j.id LIMIT 1), 0)::bigint AS head_id
  FROM pgtask.queue_groups g WHERE g.queue = @queue AND g.group_key = @group_key;

-- name: AnalyzeJobs :exec
-- Refreshes the planner's statistics after a bulk load (the claim benchmark).
ANALYZE pgtask.jobs;

-- name: CountListeners :one
-- Sessions of this database waiting for pgtask's notifications: their last
-- statement was a LISTEN or one of the listener's idle locks' (queries/wake.sql).
SELECT count(*)::bigint AS listeners
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND state = 'idle'
   AND query ~ '^-- name: (Listen|ListenBehind|ListenCancel|ListenFinished|AnnounceIdle|WithdrawIdle|EnqueuesInFlight) ';

-- name: TransactionIsolation :one
-- The isolation level of the current transaction, as SHOW prints it.
SELECT current_setting('transaction_isolation')::text AS level;

-- name: BackendExists :one
-- Whether a server process with this PID is still there (tests wait for a
-- terminated session to be gone).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = @pid::integer) AS present;

-- name: DeleteJob :execrows
-- What an operator might run by hand.
DELETE FROM pgtask.jobs WHERE id = @id;

-- name: DeleteFinishedJobs :execrows
DELETE FROM pgtask.jobs WHERE status IN ('succeeded', 'failed', 'cancelled');

-- name: TruncateJobs :exec
TRUNCATE pgtask.jobs;

-- name: ExpireLease :execrows
-- Makes a leased job's lease run out now, as a hung worker's would.
UPDATE pgtask.jobs SET lease_until = now() - interval '1 second'
 WHERE id = @id AND status = 'started' AND lease_until IS NOT NULL;

-- name: ParseJSONB :one
-- The server's own verdict on a JSON document: what the payload check must
-- agree with.
SELECT CAST(sqlc.arg(doc)::text AS jsonb) AS doc;

-- name: DatabaseNow :one
SELECT clock_timestamp()::timestamptz AS now;

-- name: CountStartedAfter :one
-- Jobs of a queue whose current attempt was claimed after a moment.
SELECT count(*)::bigint AS started FROM pgtask.jobs WHERE queue = @queue AND started_at > @after::timestamptz;

-- name: CountQueueStatus :one
SELECT count(*)::bigint AS jobs FROM pgtask.jobs WHERE queue = @queue AND status = @status;

-- name: BackdateFinished :exec
-- Makes a finished job look as if it finished @age_ms ago.
UPDATE pgtask.jobs SET finished_at = clock_timestamp() - make_interval(secs => @age_seconds::float8) WHERE id = @id;

-- name: CurrentLeader :one
SELECT worker_id FROM pgtask.leaders WHERE duty = 'leader';

-- name: TerminateListeners :one
-- Ends the sessions waiting for pgtask's notifications, as a network cut
-- would: what is notified until they reconnect is lost to them. They are
-- found as CountListeners finds them.
SELECT count(pg_catalog.pg_terminate_backend(pid))::bigint AS terminated
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_catalog.pg_backend_pid()
   AND query ~ '^-- name: (Listen|ListenBehind|ListenCancel|ListenFinished|AnnounceIdle|WithdrawIdle|EnqueuesInFlight) ';

-- name: CountBlockedBy :one
-- Sessions of this database waiting for a lock the session @pid holds.
SELECT count(*)::bigint AS blocked
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND @pid::integer = ANY (pg_catalog.pg_blocking_pids(pid));

-- name: Notify :exec
-- What any session may send: a notification on one of pgtask's channels.
SELECT pg_catalog.pg_notify(@channel::text, @payload::text);

-- name: SetGroupPendingFrom :exec
-- Puts a group's bound where a race between two enqueues creating the group
-- can leave it: above a pending job of the group (see pending_from).
UPDATE pgtask.queue_groups SET pending_from = @pending_from WHERE queue = @queue AND group_key = @group_key;

-- name: CountSessionsNamed :one
-- Sessions of this database whose application_name is @name: the
-- connections a worker holds, when only it connects under that name.
SELECT count(*)::bigint AS sessions
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND application_name = @name::text;

-- name: ForgetWorkerKinds :exec
-- Deletes every worker's recorded kinds, as a worker that started while
-- the others' sessions were all gone deletes theirs.
DELETE FROM pgtask.worker_kinds;

-- name: FillErrorHistory :exec
-- Gives a job an error history of @entries failed attempts, as code that kept
-- it unbounded could leave.
UPDATE pgtask.jobs
   SET errors = (SELECT jsonb_agg(jsonb_build_object('attempt', i, 'error', 'an old failure', 'at', now()) ORDER BY i)
                   FROM generate_series(1, @entries::integer) AS i)
 WHERE id = @id;

-- name: DropQueueBound :exec
-- With RestoreQueueBoundNotValid: lets a test store what code from before
-- the bound on queue names could have stored.
ALTER TABLE pgtask.jobs DROP CONSTRAINT jobs_queue_bounded;

-- name: RestoreQueueBoundNotValid :exec
ALTER TABLE pgtask.jobs ADD CONSTRAINT jobs_queue_bounded CHECK (octet_length(queue) <= 128) NOT VALID;

-- name: DropUniqueKeyBound :exec
-- With RestoreUniqueKeyBoundNotValid: as DropQueueBound, for the bound on
-- unique keys.
ALTER TABLE pgtask.jobs DROP CONSTRAINT jobs_unique_key_bounded;

-- name: RestoreUniqueKeyBoundNotValid :exec
ALTER TABLE pgtask.jobs ADD CONSTRAINT jobs_unique_key_bounded CHECK (octet_length(unique_key) <= 1300) NOT VALID;

-- name: ForgetFunctionFile :exec
-- Makes the database look as if it never ran a function file, as one
-- migrated by an older release that lacked it, or ran it at a lower
-- revision, would look to the code.
DELETE FROM pgtask.function_files WHERE name = @name;

-- name: UnvalidatedConstraints :many
-- The constraints of pgtask's tables that were added NOT VALID and never
-- validated: rows stored before them may break them.
SELECT c.conrelid::regclass::text AS table_name, c.conname::text AS name
  FROM pg_catalog.pg_constraint c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.connamespace
 WHERE n.nspname = 'pgtask' AND NOT c.convalidated
 ORDER BY 1, 2;

-- name: RenameMigration :exec
-- Records migration @version under another name, as a database migrated by
-- a build whose migration of that number was another one records it.
UPDATE pgtask.migrations SET name = @name WHERE version = @version;

-- name: CountSuccessCommits :one
-- The transactions that recorded a queue's successes: jobs whose outcomes
-- committed together share the xmin of their row's last version.
SELECT count(DISTINCT xmin::text)::bigint AS commits
  FROM pgtask.jobs
 WHERE queue = @queue AND status = 'succeeded';

-- name: BackendPID :one
-- The server process of the session that runs it (a handler's job
-- transaction, say).
SELECT pg_catalog.pg_backend_pid()::integer AS pid;

-- name: TerminateBackend :one
-- Ends another session, as a network cut or an operator would.
SELECT pg_catalog.pg_terminate_backend(@pid::integer) AS terminated;

-- name: GroupPendingIndexReads :one
-- How many entries of the index of pending grouped jobs this database's
-- scans have read, after flushing this session's counts.
SELECT coalesce((SELECT s.idx_tup_read FROM pg_catalog.pg_stat_all_indexes s
                  WHERE s.schemaname = 'pgtask' AND s.indexrelname = 'jobs_group_pending'), 0)::bigint AS reads
  FROM (SELECT pg_catalog.pg_stat_force_next_flush()) f;

-- name: ClaimIndexReads :one
-- How many entries of the claim index this database's scans have read,
-- after flushing this session's counts.
SELECT coalesce((SELECT s.idx_tup_read FROM pg_catalog.pg_stat_all_indexes s
                  WHERE s.schemaname = 'pgtask' AND s.indexrelname = 'jobs_claim'), 0)::bigint AS reads
  FROM (SELECT pg_catalog.pg_stat_force_next_flush()) f;

-- name: IndexReads :one
-- How many entries of the pgtask index named index this database's scans
-- have read, after flushing this session's counts.
SELECT coalesce((SELECT s.idx_tup_read FROM pg_catalog.pg_stat_all_indexes s
                  WHERE s.schemaname = 'pgtask' AND s.indexrelname = @index::text), 0)::bigint AS reads
  FROM (SELECT pg_catalog.pg_stat_force_next_flush()) f;

-- name: PinHorizon :one
-- Run in a REPEATABLE READ transaction left open: its snapshot keeps every
-- row version deleted or updated after it, and their index entries.
SELECT count(*)::bigint AS jobs FROM pgtask.jobs;

-- name: SetProgressAttempt :execrows
-- Makes a job's progress look reported by another attempt, as a later
-- attempt's report racing an earlier one's would leave it.
UPDATE pgtask.job_progress SET attempt = @attempt WHERE job_id = @job_id;

-- name: BackdateBatchFinished :exec
-- Makes an ended batch look as if it ended age_seconds ago.
UPDATE pgtask.batches SET finished_at = clock_timestamp() - make_interval(secs => @age_seconds::float8)
 WHERE id = @id AND finished_at IS NOT NULL;

-- name: CreateBatch :one
-- Calls create_batch with ids of the caller's choosing, as a producer
-- could, to show what it refuses.
SELECT pgtask.create_batch(@ids::bigint[], @existed::boolean[], false, false)::bigint AS batch_id;

-- name: GetBatchRow :one
SELECT * FROM pgtask.batches WHERE id = @id;

-- name: SetJobQueue :exec
-- Moves a job to another queue, as a test that makes a row the table's
-- checks refuse (see DropQueueBound) needs.
UPDATE pgtask.jobs SET queue = @queue WHERE id = @id;

-- name: LockJobRow :exec
-- Locks job @id's row until the caller's transaction ends, as an operator's
-- change of it would.
SELECT 1 FROM pgtask.jobs WHERE id = @id FOR UPDATE;

-- name: LockGroupRow :exec
-- Locks the row of queue @queue's group @group_key until the caller's
-- transaction ends, as an enqueue into the group or an operator's change
-- of one of its jobs would.
SELECT 1 FROM pgtask.queue_groups WHERE queue = @queue AND group_key = @group_key FOR UPDATE;

-- name: UnlockedRateKeys :one
-- How many of queue @queue's rate keys no other session holds the row of.
SELECT count(*)::bigint AS unlocked
  FROM (SELECT 1 FROM pgtask.rate_keys WHERE queue = @queue FOR NO KEY UPDATE SKIP LOCKED) k;

-- name: WorkflowNotesLeft :one
-- The notes of workflow steps not applied yet.
SELECT count(*)::integer AS notes FROM pgtask.workflow_notes;

-- name: WorkflowNotesWritten :one
-- How many notes were ever left in this database (statistics: as of the
-- last report of each session that wrote some).
SELECT coalesce((SELECT n_tup_ins FROM pg_catalog.pg_stat_user_tables
                  WHERE schemaname = 'pgtask' AND relname = 'workflow_notes'), 0)::bigint AS written;

-- name: WorkflowWait :one
-- How many parents step @id still waits for, and the parent whose failure
-- cancelled it (0 for none).
SELECT remaining, coalesce(cancelled_by, 0)::bigint AS cancelled_by FROM pgtask.workflow_waits WHERE job_id = @id;

-- name: FinishJobAs :execrows
-- Ends job @id with @status, as a worker or an operator would (its
-- triggers fire).
UPDATE pgtask.jobs SET status = @status, finished_at = now(), is_head = (is_head AND group_key IS NOT NULL)
 WHERE id = @id AND pgtask.job_pending(status);

-- name: SetLockTimeout :exec
SELECT set_config('lock_timeout', @timeout::text, false);

-- name: TerminateJobTransactions :one
-- Ends up to @max sessions of this database (not this one) that sit idle
-- in a transaction, as a worker's held batch does while its handlers run.
SELECT count(pg_terminate_backend(pid))::integer AS terminated
  FROM (SELECT pid FROM pg_catalog.pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle in transaction'
         ORDER BY random() LIMIT @max::integer) s;

-- name: ApplyWorkflowNotesNow :one
SELECT pgtask.apply_workflow_notes(NULL, 1000)::integer AS applied;

-- name: BackdateWorkflow :exec
-- Makes a workflow look as if it was created age_seconds ago.
UPDATE pgtask.workflows SET created_at = clock_timestamp() - make_interval(secs => @age_seconds::float8) WHERE id = @id;

-- name: WorkflowRowsLeft :one
-- The rows of workflow @id's bookkeeping: itself, its dependencies and its
-- steps' counts.
SELECT (SELECT count(*) FROM pgtask.workflows WHERE id = @id)
     + (SELECT count(*) FROM pgtask.workflow_edges WHERE workflow_id = @id)
     + (SELECT count(*) FROM pgtask.workflow_waits WHERE workflow_id = @id) AS left_over;

-- name: JobAndWorkflowRows :one
-- How many jobs and workflows there are, together.
SELECT (SELECT count(*) FROM pgtask.jobs) + (SELECT count(*) FROM pgtask.workflows) AS rows;

-- name: CountIdleInTransaction :one
-- Sessions of this database (not this one) that sit in an open
-- transaction between statements.
SELECT count(*)::integer AS sessions FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle in transaction';

-- name: TerminateSettlers :one
-- Ends up to @max sessions of this database (not this one) that are
-- recording outcomes (pgtask.settle_jobs) right now, as a lost connection
-- would end them mid-way.
SELECT count(pg_terminate_backend(pid))::integer AS terminated
  FROM (SELECT pid FROM pg_catalog.pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
           AND query ~ '^-- name: SettleJobs '
         ORDER BY random() LIMIT @max::integer) s;
-- name: LimitSlots :many
-- Each limit key of a queue, read in one snapshot: its limit, its free
-- slots, its admitted jobs started and queued, and the slots given back
-- into notes that maintenance has not applied yet. The admitted jobs, the
-- free slots and the noted ones add up to the limit at every instant.
SELECT k.limit_key, k.max_running, k.free,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.limit_id = k.id AND j.is_head AND j.status = 'started')::bigint AS started,
       (SELECT count(*) FROM pgtask.jobs j
         WHERE j.limit_id = k.id AND j.is_head AND j.status = 'queued')::bigint AS queued,
       (SELECT coalesce(sum(c.released), 0) FROM pgtask.limit_checks c WHERE c.key_id = k.id)::bigint AS noted
  FROM pgtask.limit_keys k
 WHERE k.queue = @queue
 ORDER BY k.limit_key;

-- name: LimitKeysWrittenHere :one
-- How many of queue @queue's limit keys' rows the caller's transaction
-- wrote.
SELECT count(*)::bigint AS written FROM pgtask.limit_keys
 WHERE queue = @queue AND xmin = xid(pg_current_xact_id());

-- name: ReadyLimitKeys :one
-- How many of queue @queue's limit keys are ready (free slots, jobs
-- waiting: in limit_keys_ready).
SELECT count(*)::bigint AS ready FROM pgtask.limit_keys
 WHERE queue = @queue AND waiting AND free > 0;

-- name: LimitKeyFrontier :one
-- Where key @limit_key of queue @queue's claims look for its jobs from.
SELECT frontier_priority, frontier_id FROM pgtask.limit_keys
 WHERE queue = @queue AND limit_key = @limit_key;

-- name: JobTriggersNeedingPlanning :many
-- The triggers on pgtask.jobs whose WHEN clause calls a SQL-language
-- function or holds an IN list. Every statement that updates or deletes
-- jobs prepares each trigger's WHEN again: a SQL function in one is inlined
-- there, its body parsed anew, and an IN list folded into an array. (A
-- built-in function costs its call only.)
SELECT t.tgname::text AS trigger_name
  FROM pg_catalog.pg_trigger t
 WHERE t.tgrelid = 'pgtask.jobs'::regclass
   AND (t.tgqual::text LIKE '%{ARRAYEXPR %'
        OR EXISTS (SELECT 1
                     FROM regexp_matches(t.tgqual::text, '\{FUNCEXPR :funcid (\d+)', 'g') AS f(m)
                     JOIN pg_catalog.pg_proc p ON p.oid = f.m[1]::oid
                     JOIN pg_catalog.pg_language l ON l.oid = p.prolang
                    WHERE l.lanname = 'sql'))
 ORDER BY t.tgname;

-- name: TrackFunctionCalls :exec
-- Counts the calls of SQL and PL/pgSQL functions in the caller's
-- transaction (see FunctionCallsHere); tests connect as a superuser.
SELECT set_config('track_functions', 'all', true);

-- name: FunctionCallsHere :many
-- The calls of pgtask's functions the caller's transaction made, counted
-- since TrackFunctionCalls (functions inlined into a statement are not),
-- with each function's language and volatility ('i', 's' or 'v').
SELECT f.funcname::text AS function_name, f.calls::bigint AS calls, l.lanname::text AS language,
       p.provolatile::text AS volatility
  FROM pg_catalog.pg_stat_xact_user_functions f
  JOIN pg_catalog.pg_proc p ON p.oid = f.funcid
  JOIN pg_catalog.pg_language l ON l.oid = p.prolang
 WHERE f.schemaname = 'pgtask'
 ORDER BY f.funcname;

-- name: WorkflowTriggersPendingArrays :many
-- Each jobs_workflow_* trigger's definition, beside the statuses for which
-- pgtask.job_pending holds, written as the array constant the triggers
-- spell out.
SELECT t.tgname::text AS trigger_name, pg_catalog.pg_get_triggerdef(t.oid)::text AS definition,
       (SELECT '''{' || string_agg(s::text, ',' ORDER BY s) || '}''::pgtask.job_status[]'
          FROM unnest(enum_range(NULL::pgtask.job_status)) AS s
         WHERE pgtask.job_pending(s))::text AS pending_array
  FROM pg_catalog.pg_trigger t
 WHERE t.tgrelid = 'pgtask.jobs'::regclass AND t.tgname LIKE 'jobs\_workflow\_%'
 ORDER BY t.tgname;

-- name: JobRowsReadHere :one
-- How many rows of the jobs table the caller's transaction has read so
-- far: fetched through indexes, and read by sequential scans.
SELECT coalesce(s.idx_tup_fetch, 0)::bigint AS fetched, coalesce(s.seq_tup_read, 0)::bigint AS scanned
  FROM pg_catalog.pg_stat_xact_user_tables s
 WHERE s.relid = 'pgtask.jobs'::regclass;

-- name: WaitingIndexBlocksHere :one
-- How many blocks of the index of limited jobs waiting for a slot the
-- caller's transaction has read so far.
SELECT pg_catalog.pg_stat_get_xact_blocks_fetched('pgtask.jobs_limit_waiting'::regclass)::bigint AS blocks;

-- name: LockCancelRequest :one
-- Takes job @job_id's cancel request's row as apply_cancel_requests takes
-- it, until the caller's transaction ends.
SELECT c.job_id FROM pgtask.cancel_requests c WHERE c.job_id = @job_id FOR UPDATE;

-- name: TrackPLFunctionCalls :exec
-- Counts the calls of PL/pgSQL functions for the rest of this transaction,
-- to price what a statement does by its work, not by the clock.
SELECT set_config('track_functions', 'pl', true);

-- name: FunctionCallsThisTransaction :one
-- The calls of pgtask's PL/pgSQL functions this session made so far (with
-- TrackPLFunctionCalls on) and has not reported yet: this transaction's,
-- and those of earlier ones not reported yet.
SELECT coalesce(sum(calls), 0)::bigint AS calls
  FROM pg_catalog.pg_stat_xact_user_functions
 WHERE schemaname = 'pgtask';

-- name: WorkflowEdgeOutcome :one
-- What step @child was told of its parent @parent ('' nothing yet).
SELECT coalesce(outcome::text, '')::text AS outcome FROM pgtask.workflow_edges WHERE parent = @parent AND child = @child;

-- name: StartJobAsLeased :execrows
-- Starts queued job @id with a lease and commits nothing else, as a lease
-- claim does.
UPDATE pgtask.jobs SET status = 'started', attempts = attempts + 1, started_at = now(),
                       lease_until = now() + interval '1 minute'
 WHERE id = @id AND status = 'queued';

-- name: CancelRequested :one
-- Whether job @id's worker has been asked to stop it.
SELECT EXISTS (SELECT 1 FROM pgtask.cancel_requests WHERE job_id = @id) AS requested;

-- name: WorkflowCancelPending :one
-- Whether maintenance still has steps of workflow @id to cancel.
SELECT cancel_pending FROM pgtask.workflows WHERE id = @id;

-- name: WorkflowEdgeRowsReadHere :one
-- How many rows of the workflow edges the caller's transaction has read so
-- far: fetched through indexes, and read by sequential scans.
SELECT coalesce(s.idx_tup_fetch, 0)::bigint AS fetched, coalesce(s.seq_tup_read, 0)::bigint AS scanned
  FROM pg_catalog.pg_stat_xact_user_tables s
 WHERE s.relid = 'pgtask.workflow_edges'::regclass;

-- name: WorkflowRowUpdatesHere :many
-- The updates of the workflow edges and waits rows the caller's
-- transaction has made so far, and how many of them were HOT (no index
-- entry added).
SELECT s.relname::text AS table_name, coalesce(s.n_tup_upd, 0)::bigint AS updates, coalesce(s.n_tup_hot_upd, 0)::bigint AS hot
  FROM pg_catalog.pg_stat_xact_user_tables s
 WHERE s.relid IN ('pgtask.workflow_edges'::regclass, 'pgtask.workflow_waits'::regclass)
 ORDER BY s.relname;

-- name: TenantsInClaimOrder :many
-- The tenants of queue @queue's jobs in the order their last attempts were
-- claimed: by the claim's time (started_at, one for all the jobs of a
-- claim), then by turn, the order a fair claim takes them in.
SELECT coalesce(tenant, '')::text AS tenant
  FROM pgtask.jobs
 WHERE queue = @queue::text AND started_at IS NOT NULL
 ORDER BY started_at, fair_seq, id;

-- name: ClaimJobs :many
-- Claims up to @max jobs of a queue and counts their attempt (see
-- pgtask.claim_jobs; the cursor is the last head the worker's scans found,
-- or NULL, and the floor where its look behind the cursor starts, or NULL
-- for the start; kinds are those the worker has handlers for, or NULL for
-- any). scanned marks the heads that move the cursor (see pgtask.scanned).
-- cancel_cause marks the attempts not to run, with why (see
-- pgtask.cancel_claimed and pgtask.cancel_requests.cause): '' for the
-- others.
-- Run on its own, the statement commits before any
-- handler runs; run at the end of a job transaction, that transaction's
-- commit does. owner_pid names this session: the job transaction that
-- follows runs on the same connection.
SELECT c.id::bigint AS id, c.queue::text AS queue, c.kind::text AS kind,
       coalesce(c.group_key, '')::text AS group_key, c.priority::smallint AS priority, c.payload::jsonb AS payload,
       c.attempts::integer AS attempts, c.max_attempts::integer AS max_attempts,
       c.fail_blocks_group::boolean AS fail_blocks_group, c.created_at::timestamptz AS created_at,
       c.run_after::timestamptz AS run_after, c.metadata::jsonb AS metadata, c.scanned::boolean AS scanned,
       c.snoozes::integer AS snoozes, coalesce(c.cancel_cause, '')::text AS cancel_cause
  FROM pgtask.claim_jobs(@queue, @max, @worker_id, sqlc.narg(after_priority)::smallint, sqlc.narg(after_id)::bigint,
                         sqlc.narg(floor_id)::bigint, @behind_first::boolean, sqlc.narg(token)::bigint, sqlc.narg(kinds)::text[])
       AS c(id, queue, kind, group_key, priority, payload, attempts, max_attempts, fail_blocks_group, created_at,
            run_after, metadata, scanned, snoozes, cancel_cause);

-- name: HoldJobs :many
-- First statement of the job transaction: locks the claimed rows for as long
-- as the handlers run (the lock tells everyone else the jobs are alive) and
-- sets the transaction's idle timeout.
SELECT h.id::bigint AS id FROM pgtask.hold_jobs(@ids::bigint[], @idle_timeout_ms::bigint) AS h(id);

-- name: CompleteJobs :one
SELECT pgtask.complete_jobs(@ids::bigint[], @attempts::integer[], @results::jsonb[]) AS recorded;

-- name: FailJob :one
-- The status is empty when the job was not the caller's started attempt.
SELECT COALESCE(pgtask.fail_job(@id, @attempt, @error, sqlc.narg(retry_in_us),
                                sqlc.narg(snooze_cap)::integer, sqlc.narg(token)::bigint)::text, '')::text AS status;

-- name: HandBack :one
-- Gives back claimed jobs whose handlers never started, their attempts
-- returned, in either mode (see pgtask.hand_back for the rule and the
-- fence): held, owner_pid and worker_id, the session that claimed them;
-- lease, each job's attempt and its claim's token. ids NULL: every job of
-- the claim (the session's, or the one token's).
SELECT h.released::bigint AS released, h.woken::bigint AS woken
  FROM pgtask.hand_back(sqlc.narg(ids)::bigint[], sqlc.narg(owner_pid)::integer, sqlc.narg(worker_id)::integer,
                        sqlc.narg(attempts)::integer[], sqlc.narg(tokens)::bigint[]) AS h;

-- name: RescueOrphans :many
-- Requeues jobs of dead workers; worker_id is the caller's own worker.
SELECT r.id::bigint AS id FROM pgtask.rescue_orphans(@max, @worker_id::integer) AS r(id);

-- name: AgePriorities :one
-- skipped: due jobs whose rows break a check (see pgtask.age_priorities).
SELECT a.aged::integer AS aged, a.skipped::bigint[] AS skipped FROM pgtask.age_priorities(@max) a;

-- name: FinishBatches :one
-- See pgtask.finish_batches.
SELECT f.checked::integer AS checked, f.last::bigint AS last, f.finished::integer AS finished
  FROM pgtask.finish_batches(@after::bigint, @max::integer) f;

-- name: DeleteFinishedBatches :one
-- See pgtask.delete_finished_batches.
SELECT pgtask.delete_finished_batches(@older_than_ms::bigint, @max::integer)::integer AS deleted;

-- name: PromoteScheduled :one
-- skipped: due jobs whose rows break a check (see pgtask.promote_scheduled).
SELECT p.moved::integer AS moved, p.skipped::bigint[] AS skipped FROM pgtask.promote_scheduled(@max) p;

-- name: CheckLimits :one
-- Applies pending checks of limited keys and admits waiting jobs into free
-- slots; see pgtask.check_limits.
SELECT pgtask.check_limits(@max::integer)::integer AS admitted;

-- name: CheckRates :one
-- Marks ready the rate keys that jobs came to wait on while someone else
-- held their rows; see pgtask.check_rates.
SELECT pgtask.check_rates(@max_keys::integer)::integer AS made_ready;

-- name: RateWait :one
-- How long until a job of queue @queue waiting on a rate gets its token
-- (-1: none waits); see pgtask.rate_wait_us.
SELECT coalesce(pgtask.rate_wait_us(@queue::text), -1)::bigint AS wait_us;

-- name: RatedQueues :many
-- Which of @queues have rate keys; see pgtask.rated_queues.
SELECT q::text AS queue FROM pgtask.rated_queues(@queues::text[]) q;

-- name: TerminateBackend :one
SELECT pg_terminate_backend(@pid) AS terminated;

-- name: Listen :exec
-- New jobs (enqueues, while a worker's runner waits for them).
LISTEN pgtask;

-- name: ListenBehind :exec
-- Jobs made runnable behind the claims' cursors (promoted, retried, handed
-- back, a queue resumed): a claim must look back from the start to find
-- them (see pgtask.pick_heads).
LISTEN pgtask_behind;


-- name: SavepointJob :exec
-- Each job of a batch runs between these, so a failed job's writes roll back
-- alone and the batch's other jobs commit.
SAVEPOINT pgtask_job;

-- name: ReleaseJobSavepoint :exec
RELEASE SAVEPOINT pgtask_job;

-- name: RollbackJobSavepoint :exec
ROLLBACK TO SAVEPOINT pgtask_job;

-- name: AdvanceGroups :one
-- Moves a batch's groups on (see pgtask.advance_groups); returns the keys
-- that were busy with an enqueue in flight.
SELECT pgtask.advance_groups(@queue, @group_keys::text[], @patience_ms::integer)::text[] AS busy;

-- name: AdvanceFinishedGroups :one
SELECT pgtask.advance_finished_groups(@max) AS moved;

-- name: LockWorker :exec
-- Taken, shared, by every session of a worker process when it connects, and
-- held while the session lives: it tells rescuers the process is alive even
-- when the session a job ran on is lost. So the session also turns off
-- idle_session_timeout (PostgreSQL 14 and later), which a database or role
-- may set: a worker's sessions wait idle for work, and the listener's always
-- does; were they all ended, the lock would be free while the process lives
-- and runs leased jobs.
SELECT pg_advisory_lock_shared(pgtask.worker_lock_class(), @worker_id::integer),
       CASE WHEN current_setting('server_version_num')::integer >= 140000
            THEN set_config('idle_session_timeout', '0', false) END;

-- name: SettleJobs :one
-- Records a batch's outcomes and moves their groups on (see
-- pgtask.settle_jobs); sent with the next claim and the commit.
SELECT s.recorded::integer AS recorded, s.busy::text[] AS busy
  FROM pgtask.settle_jobs(@queue, @ids::bigint[], @attempts::integer[], @results::jsonb[], @errors::jsonb[], @retry_in_us::bigint[],
                         @snooze_caps::integer[], @tokens::bigint[], @claiming::boolean) s;

-- name: HoldClaimedJobs :many
-- First statement of a job transaction begun in the same round trip as the
-- previous transaction's claim and commit: locks what that claim took.
SELECT h.id::bigint AS id FROM pgtask.hold_claimed_jobs(@token::bigint, @idle_timeout_ms::bigint) AS h(id);

-- name: BeginJobTransaction :exec
-- Claiming and advancing groups read what was committed after they took
-- their locks, which needs READ COMMITTED whatever the session defaults to.
BEGIN ISOLATION LEVEL READ COMMITTED;

-- name: CommitJobTransaction :exec
COMMIT;

-- name: ClaimLeasedJobs :many
-- Claims up to @max jobs with a lease, runnable heads and the runs behind
-- them (see pgtask.claim_leased_jobs), of the kinds the worker has
-- handlers for (NULL: any); sent with a batch's outcomes and its commit.
SELECT c.id::bigint AS id, c.queue::text AS queue, c.kind::text AS kind,
       coalesce(c.group_key, '')::text AS group_key, c.priority::smallint AS priority, c.payload::jsonb AS payload,
       c.attempts::integer AS attempts, c.max_attempts::integer AS max_attempts,
       c.fail_blocks_group::boolean AS fail_blocks_group, c.created_at::timestamptz AS created_at,
       c.run_after::timestamptz AS run_after, c.metadata::jsonb AS metadata, c.scanned::boolean AS scanned,
       c.snoozes::integer AS snoozes, coalesce(c.cancel_cause, '')::text AS cancel_cause
  FROM pgtask.claim_leased_jobs(@queue, @max, @worker_id, @lease_ms::bigint,
                                 sqlc.narg(after_priority)::smallint, sqlc.narg(after_id)::bigint,
                                 sqlc.narg(floor_id)::bigint, @behind_first::boolean, @token::bigint, @run_max::integer, sqlc.narg(kinds)::text[])
       AS c(id, queue, kind, group_key, priority, payload, attempts, max_attempts, fail_blocks_group, created_at,
            run_after, metadata, scanned, snoozes, cancel_cause);

-- name: ExtendLeases :many
-- Extends the leases of claimed attempts, each fenced by its attempt and
-- its claim's token (see pgtask.extend_leases).
SELECT e.id::bigint AS id
  FROM pgtask.extend_leases(@ids::bigint[], @attempts::integer[], @tokens::bigint[], @lease_ms::bigint) AS e(id);

-- name: ExpireLeases :many
SELECT e.id::bigint AS id FROM pgtask.expire_leases(@max, @worker_id::integer) AS e(id);

-- name: SetTransactionIdleTimeout :exec
-- Bounds how long a lease-mode job's own transaction may sit idle.
SELECT set_config('idle_in_transaction_session_timeout', @timeout_ms::bigint::text, true);

-- name: OwnOrphans :many
-- The worker's own held-mode jobs whose session is gone, locked until the
-- transaction ends (see pgtask.own_orphans); token is the claim's.
SELECT o.id::bigint AS id, coalesce(o.claim_token, 0)::bigint AS token
  FROM pgtask.own_orphans(@worker_id::integer, @max::integer) AS o;

-- name: RescueJobs :many
-- Records the attempts of started jobs as lost with their worker.
SELECT r.id::bigint AS id FROM pgtask.rescue_jobs(@ids::bigint[]) AS r(id);

-- name: ListenCancel :exec
-- Cancel requests of running jobs (see pgtask.cancel_job): each
-- notification's payload is a job id.
LISTEN pgtask_cancel;

-- name: CancelRequested :many
-- Which of the worker's running attempts a cancel request asks to stop (an
-- operator's, or its workflow's cancel), with why (see
-- pgtask.cancel_requested).
SELECT c.id::bigint AS id, c.cause::text AS cause
  FROM pgtask.cancel_requested(@ids::bigint[], @attempts::integer[]) AS c(id, cause);

-- name: ApplyCancelRequests :one
-- Cancels the jobs whose cancel request outlived its attempt, and drops the
-- stale requests (see pgtask.apply_cancel_requests).
SELECT pgtask.apply_cancel_requests(@max::integer) AS cancelled;

-- name: ReportProgress :execrows
-- Records a running attempt's progress, from a connection of the worker's
-- pool rather than the job's transaction, so that other sessions see it at
-- once. Fenced: it writes only while the attempt is the job's current one
-- (started, with this attempt number and the claim's token, NULL for a
-- claim without one), and never replaces the progress of a later attempt; it reports
-- 0 rows when refused. A plain read of the job's row: a held-mode job's
-- row is locked by its attempt, and this must not wait for that lock.
INSERT INTO pgtask.job_progress AS p (job_id, attempt, percent, message, value, updated_at)
SELECT j.id, j.attempts, @percent::double precision, @message::text, sqlc.narg(value)::jsonb, now()
  FROM pgtask.jobs j
 WHERE j.id = @job_id AND j.status = 'started' AND j.attempts = @attempt::integer
   AND (sqlc.narg(claim_token)::bigint IS NULL OR j.claim_token = sqlc.narg(claim_token)::bigint)
ON CONFLICT (job_id) DO UPDATE
   SET attempt = excluded.attempt, percent = excluded.percent, message = excluded.message,
       value = excluded.value, updated_at = excluded.updated_at
 WHERE p.attempt <= excluded.attempt;

-- name: ListenWorkflow :exec
-- Workflow notes left behind a locked step (see pgtask.workflow_settle):
-- each notification's payload is the steps' ids, comma-separated.
LISTEN pgtask_workflow;

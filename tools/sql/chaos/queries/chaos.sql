-- Queries of pgtask-chaos (tools/cmd/pgtask-chaos): recording a run in
-- pgtask_chaos (../schema) and checking pgtask's guarantees against it.

-- name: RecordEnqueued :exec
-- Records committed jobs; runs in the transaction that enqueues them. An
-- empty group key means an ungrouped job, a limit_max of 0 one without a
-- concurrency limit. expects is how each must end.
INSERT INTO pgtask_chaos.enqueued (job_id, group_key, seq, behavior, how, limit_key, limit_max, expect)
SELECT unnest(@job_ids::bigint[]), NULLIF(unnest(@group_keys::text[]), ''),
       unnest(@seqs::integer[]), unnest(@behaviors::text[]), @how::text,
       unnest(@limit_keys::text[]), NULLIF(unnest(@limit_maxes::integer[]), 0),
       unnest(@expects::text[]);

-- name: RecordWorkflow :exec
-- Records a committed workflow; runs in the transaction that enqueues it.
INSERT INTO pgtask_chaos.workflows (workflow_id, steps, cancel_expected, operator_cancel)
VALUES (@workflow_id, @steps, @cancel_expected, @operator_cancel);

-- name: RecordBatch :exec
-- Records a committed batch and its two callbacks (their ids read from
-- pgtask.batches), in the transaction that enqueues it: the OnFinish
-- callback must succeed, the OnFailure one succeed if a job of the batch
-- is meant to fail for good, else end cancelled.
WITH b AS (
    INSERT INTO pgtask_chaos.batches (batch_id, jobs, expect_failure)
    VALUES (@batch_id, @jobs, @expect_failure)
    RETURNING batch_id, expect_failure
)
INSERT INTO pgtask_chaos.enqueued (job_id, group_key, seq, behavior, how, expect, callback)
SELECT pb.on_finish, NULL, 0, @finish_behavior::text, 'enqueue_batch', 'succeeded', 'finish'
  FROM b JOIN pgtask.batches pb ON pb.id = b.batch_id
UNION ALL
SELECT pb.on_failure, NULL, 0, @failure_behavior::text, 'enqueue_batch',
       CASE WHEN b.expect_failure THEN 'succeeded' ELSE 'cancelled' END, 'failure'
  FROM b JOIN pgtask.batches pb ON pb.id = b.batch_id;

-- name: RecordCallbackRun :exec
-- Written by a batch callback's handler through its job's transaction:
-- what its summary (runtime.BatchSummaryOf) said.
INSERT INTO pgtask_chaos.callback_runs (job_id, attempt, batch_id, finished, total, succeeded, failed, cancelled, deleted)
VALUES (@job_id, @attempt, @batch_id, @finished, @total, @succeeded, @failed, @cancelled, @deleted);

-- name: RecordOperatorCancel :exec
-- Runs in the transaction of an operator's CancelWorkflowByID: the row
-- exists if and only if the cancel committed. A cancel tried again after
-- its commit's outcome was lost keeps the first row.
INSERT INTO pgtask_chaos.operator_cancels (workflow_id, marked) VALUES (@workflow_id, @marked)
    ON CONFLICT (workflow_id) DO NOTHING;

-- name: OperatorCancelled :one
-- Whether an operator's cancel of the workflow committed.
SELECT EXISTS (SELECT 1 FROM pgtask_chaos.operator_cancels WHERE workflow_id = @workflow_id) AS done;

-- name: CommittedAmong :many
-- Which of these ids were committed: answers a commit whose outcome is unknown.
SELECT job_id FROM pgtask_chaos.enqueued WHERE job_id = ANY(@job_ids::bigint[]) ORDER BY job_id;

-- name: RecordNotCommitted :exec
INSERT INTO pgtask_chaos.not_committed (job_id, group_key, reason)
SELECT unnest(@job_ids::bigint[]), NULLIF(unnest(@group_keys::text[]), ''), @reason::text
    ON CONFLICT (job_id) DO NOTHING;

-- name: BackendExists :one
-- Whether a server process with this PID is still there: a cut-off commit's
-- outcome is settled once its session is gone.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = @pid::integer) AS present;

-- name: StartAttempt :exec
-- Written by a handler as it begins, outside the job's transaction. Writing
-- the same id again (the reply to the first write was lost) changes nothing.
INSERT INTO pgtask_chaos.attempts (id, job_id, attempt, group_key, instance, worker_pid, mode, backend_pid)
VALUES (@id, @job_id, @attempt, NULLIF(@group_key::text, ''), @instance, @worker_pid, @mode::text, @backend_pid)
    ON CONFLICT (id) DO NOTHING;

-- name: EndAttempt :exec
-- Keeps the first end written, should a lost reply make the handler write again.
UPDATE pgtask_chaos.attempts
   SET ended_at = coalesce(ended_at, clock_timestamp()), outcome = coalesce(outcome, @outcome::text)
 WHERE id = @id;

-- name: InsertEffect :exec
-- Written by a handler through its job's transaction.
INSERT INTO pgtask_chaos.effects (job_id, attempt, instance) VALUES (@job_id, @attempt, @instance);

-- name: InstanceStartedAnAttempt :one
-- Whether worker process instance has recorded the start of an attempt:
-- the ids of its attempts are instance << 32 | a counter from 1 (see the
-- handler's start), so its first is the key's lower end.
SELECT EXISTS (SELECT 1 FROM pgtask_chaos.attempts
                WHERE id BETWEEN (@instance::bigint << 32) AND ((@instance::bigint << 32) | 4294967295))::boolean AS started;

-- name: RecordDeath :exec
INSERT INTO pgtask_chaos.deaths (instance, pid, kind) VALUES (@instance, @pid, @kind::text);

-- name: RecordPause :one
-- Written just before a worker process is stopped (SIGSTOP).
INSERT INTO pgtask_chaos.pauses (instance, pid) VALUES (@instance, @pid) RETURNING id;

-- name: RecordResume :exec
-- Written just after the stopped process was continued (SIGCONT).
UPDATE pgtask_chaos.pauses SET resumed_at = clock_timestamp() WHERE id = @id AND resumed_at IS NULL;

-- name: RecordDBFault :one
-- Written just before the server is restarted or crashed.
INSERT INTO pgtask_chaos.db_faults (kind) VALUES (@kind::text) RETURNING id;

-- name: EndDBFault :exec
-- Written once the server answers again.
UPDATE pgtask_chaos.db_faults SET after_at = clock_timestamp() WHERE id = @id AND after_at IS NULL;

-- name: PinHorizon :one
-- Run in the transaction the run keeps open beside the workers. The first
-- call gives it a transaction id, which holds back the oldest xmin, and so
-- what vacuum may remove, in the whole cluster for as long as it stays
-- open; later calls return the same xid and show that it still is open.
-- next_xid - xid is how many transaction ids were handed out behind it.
SELECT txid_current()::bigint AS xid, txid_snapshot_xmax(txid_current_snapshot())::bigint AS next_xid;

-- name: LongAttemptsRunning :many
-- The attempts of long jobs that work long (attempt <= long_attempts)
-- running in these worker processes that started within the last
-- within_secs seconds, so that most of their work is still ahead.
SELECT t.instance, t.job_id, t.attempt
  FROM pgtask_chaos.attempts t JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id
 WHERE t.ended_at IS NULL AND t.instance = ANY (@instances::integer[]) AND e.behavior = 'long'
   AND t.attempt <= @long_attempts::integer
   AND t.started_at > clock_timestamp() - make_interval(secs => @within_secs::float8)
 ORDER BY t.started_at DESC;

-- name: LandedAttempt :one
-- What became of the long attempt the restart landed in: how its handler
-- ended (none: its process was killed), whether after the server was back,
-- the job's status and attempts, and the error recorded for that attempt.
SELECT coalesce(t.outcome, 'none')::text AS outcome,
       coalesce(t.ended_at > f.after_at, false)::boolean AS ended_after,
       j.status::text AS status, j.attempts,
       coalesce((SELECT x->>'error' FROM jsonb_array_elements(j.errors) x
                  WHERE (x->>'attempt')::integer = t.attempt LIMIT 1), '')::text AS error
  FROM pgtask_chaos.attempts t
  JOIN pgtask.jobs j ON j.id = t.job_id
  JOIN pgtask_chaos.db_faults f ON f.kind = 'restart'
 WHERE t.job_id = @job_id AND t.attempt = @attempt
 LIMIT 1;

-- name: JobProgress :one
SELECT count(*) FILTER (WHERE status = 'succeeded')::bigint AS succeeded,
       count(*) FILTER (WHERE status = 'failed')::bigint AS failed,
       count(*) FILTER (WHERE status = 'cancelled')::bigint AS cancelled,
       count(*) FILTER (WHERE status IN ('scheduled', 'queued', 'started'))::bigint AS unfinished,
       count(*) FILTER (WHERE status = 'started')::bigint AS running,
       count(*)::bigint AS total
  FROM pgtask.jobs;

-- name: WorkerBackends :many
-- The sessions of pgtask workers: each worker process names its sessions
-- 'pgtask worker <instance>'. Those of the processes named in spared (paused
-- now: a hung process keeps its sessions) are left out.
SELECT coalesce(pid, 0)::integer AS pid, coalesce(state, '')::text AS state,
       coalesce(application_name, '')::text AS application_name
  FROM pg_catalog.pg_stat_activity
 WHERE datname = current_database() AND application_name LIKE 'pgtask worker %'
   AND application_name <> ALL (@spared::text[])
 ORDER BY pid;

-- name: BusyWorkerBackends :many
-- The worker sessions whose job's handler is running now: it recorded its
-- start in the last second and no end yet. Those of the processes named in
-- spared are left out.
SELECT DISTINCT coalesce(a.pid, 0)::integer AS pid
  FROM pg_catalog.pg_stat_activity a
  JOIN pgtask_chaos.attempts t ON t.backend_pid = a.pid
 WHERE a.datname = current_database() AND a.application_name LIKE 'pgtask worker %'
   AND a.application_name <> ALL (@spared::text[])
   AND t.ended_at IS NULL AND t.started_at > clock_timestamp() - interval '1 second'
 ORDER BY 1;

-- name: TerminateBackend :one
SELECT pg_terminate_backend(@pid::integer) AS terminated;

-- name: EnqueuedTotals :many
-- Committed jobs by how they were enqueued and what their handler does;
-- callback: a batch's callbacks.
SELECT how, behavior, (callback IS NOT NULL)::boolean AS callback, count(*)::bigint AS jobs
  FROM pgtask_chaos.enqueued
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3;

-- name: NotCommittedTotals :many
SELECT reason, count(*)::bigint AS jobs
  FROM pgtask_chaos.not_committed
 GROUP BY reason
 ORDER BY reason;

-- name: OutcomeTotals :many
-- Attempts by how their handler ended; none when its process was killed.
SELECT coalesce(outcome, 'none')::text AS outcome, count(*)::bigint AS attempts
  FROM pgtask_chaos.attempts
 GROUP BY 1
 ORDER BY 1;

-- name: CountStartsNotRecorded :one
-- Attempts whose handler ran but could not record its start. The runtime
-- may have wrapped that error ("timed out after 300ms: chaos: start not
-- recorded: ..." when the attempt's timeout cut the recording short).
SELECT count(*)::bigint AS attempts
  FROM pgtask.jobs j, jsonb_array_elements(j.errors) x
 WHERE x->>'error' LIKE '%chaos: start not recorded%';

-- name: LeaseTotals :one
-- Lease-mode attempts taken over after their lease expired (expire_leases
-- writes an error entry starting 'lease expired' for each), those of them
-- taken over while a worker process was paused, the late outcomes the
-- runtime refused because their attempt was no longer the job's current one
-- (pgtask.jobs.stale_outcomes), and those of them on jobs that were taken
-- over (the others: outcomes of a held-mode session's jobs recorded from
-- another connection after they were rescued, or sent again after a lost
-- reply).
WITH taken AS (
    SELECT j.id, (x->>'at')::timestamptz AS at
      FROM pgtask.jobs j, jsonb_array_elements(j.errors) x
     WHERE x->>'error' LIKE 'lease expired%'
)
SELECT (SELECT count(*) FROM taken)::bigint AS taken_over,
       (SELECT count(*) FROM taken t
         WHERE EXISTS (SELECT 1 FROM pgtask_chaos.pauses p
                        WHERE t.at >= p.stopped_at AND t.at <= coalesce(p.resumed_at, 'infinity')))::bigint AS while_paused,
       (SELECT coalesce(sum(j.stale_outcomes), 0) FROM pgtask.jobs j)::bigint AS stale_outcomes,
       (SELECT coalesce(sum(j.stale_outcomes), 0) FROM pgtask.jobs j
         WHERE j.id IN (SELECT t.id FROM taken t))::bigint AS stale_on_taken;

-- name: LongAttemptTotals :many
-- Attempts of long jobs that worked long (attempt <= long_attempts), by
-- mode, and how many of them recorded the job's success.
SELECT t.mode, count(*)::bigint AS attempts,
       count(*) FILTER (WHERE j.status = 'succeeded' AND j.attempts = t.attempt)::bigint AS succeeded
  FROM pgtask_chaos.attempts t
  JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id AND e.behavior = 'long'
  JOIN pgtask.jobs j ON j.id = t.job_id
 WHERE t.attempt <= @long_attempts::integer
 GROUP BY t.mode
 ORDER BY t.mode;

-- name: LongAcrossDBFault :many
-- Attempts of long jobs that started before the server went away (the
-- restart or the crash, as kind says) and whose handler ended after it was
-- back, by mode, and how many of them the job's success was recorded for:
-- the job succeeded and that attempt was its last.
SELECT t.mode, count(*)::bigint AS spanned,
       count(*) FILTER (WHERE j.status = 'succeeded' AND j.attempts = t.attempt)::bigint AS succeeded
  FROM pgtask_chaos.db_faults f
  JOIN pgtask_chaos.attempts t ON t.started_at < f.before_at AND t.ended_at > f.after_at
  JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id AND e.behavior = 'long'
  JOIN pgtask.jobs j ON j.id = t.job_id
 WHERE f.kind = @kind::text
 GROUP BY t.mode
 ORDER BY t.mode;

-- name: PoisonJobs :many
-- The poison jobs: their attempts, how many of them reached the handler
-- (which records its start and then kills its process), and their error
-- history, which says what became of the others.
SELECT e.job_id, j.status::text AS status, j.attempts,
       (SELECT count(DISTINCT t.attempt) FROM pgtask_chaos.attempts t WHERE t.job_id = e.job_id)::bigint AS reached,
       j.errors::text AS errors
  FROM pgtask_chaos.enqueued e JOIN pgtask.jobs j ON j.id = e.job_id
 WHERE e.behavior = 'poison'
 ORDER BY e.job_id;

-- name: DeathTotals :many
SELECT kind, count(*)::bigint AS deaths FROM pgtask_chaos.deaths GROUP BY kind ORDER BY kind;

-- name: PoisonDeathInstances :many
-- The worker processes a poison job's handler recorded its own death in,
-- just before it sent itself SIGKILL.
SELECT DISTINCT instance FROM pgtask_chaos.deaths WHERE kind = 'poison' ORDER BY instance;

-- name: FinishedTotals :many
-- Finished jobs by status and by what their handler was told to do.
SELECT j.status::text AS status, coalesce(e.behavior, '')::text AS behavior, count(*)::bigint AS jobs,
       sum(j.attempts)::bigint AS attempts
  FROM pgtask.jobs j LEFT JOIN pgtask_chaos.enqueued e ON e.job_id = j.id
 GROUP BY 1, 2
 ORDER BY 1, 2;

-- The checks. Each returns one row per violation: the job, a short kind and
-- a description.

-- name: CheckNothingLost :many
-- 1. Every committed job ended as expected (enqueued.expect: poison,
-- noretry and exhaust jobs failed, the steps after a parent that failed
-- under the default policy and the OnFailure callbacks of batches with no
-- failure cancelled, the others succeeded), or, for a step of a workflow
-- that was meant to be cancelled as a whole and was, cancelled; no job
-- exists that was not committed; no id handed out in a transaction that did
-- not commit exists, ran or wrote, unless a committed transaction was
-- handed it again (see ObserveReusedIds).
SELECT e.job_id, 'unfinished'::text AS kind,
       format('job %s (%s, group %s) is %s', e.job_id, e.behavior, coalesce(e.group_key, '-'),
              coalesce(j.status::text, 'missing'))::text AS detail
  FROM pgtask_chaos.enqueued e LEFT JOIN pgtask.jobs j ON j.id = e.job_id
 WHERE j.id IS NULL OR j.status NOT IN ('succeeded', 'failed', 'cancelled')
UNION ALL
SELECT e.job_id, 'wrong end',
       format('job %s (%s%s) ended %s after %s attempts, expected %s; errors %s', e.job_id, e.behavior,
              concat(CASE WHEN j.workflow_id IS NOT NULL THEN format(', step of workflow %s', j.workflow_id) END,
                     CASE WHEN e.callback IS NOT NULL
                          THEN format(', %s callback of batch %s', e.callback,
                                      (SELECT b.id FROM pgtask.batches b WHERE e.job_id IN (b.on_finish, b.on_failure))) END),
              j.status, j.attempts, e.expect, j.errors)
  FROM pgtask_chaos.enqueued e JOIN pgtask.jobs j ON j.id = e.job_id
  LEFT JOIN pgtask_chaos.workflows w ON w.workflow_id = j.workflow_id
 WHERE j.status IN ('succeeded', 'failed', 'cancelled') AND j.status::text <> e.expect
   AND NOT (j.status = 'cancelled' AND (w.cancel_expected OR w.operator_cancel)
            AND EXISTS (SELECT 1 FROM pgtask_chaos.workflow_cancels c WHERE c.workflow_id = w.workflow_id))
UNION ALL
SELECT j.id, 'not enqueued', format('job %s (%s, group %s) exists but was never committed by the producer', j.id, j.status, coalesce(j.group_key, '-'))
  FROM pgtask.jobs j
 WHERE NOT EXISTS (SELECT 1 FROM pgtask_chaos.enqueued e WHERE e.job_id = j.id)
UNION ALL
SELECT n.job_id, 'rolled back but exists',
       format('job %s (%s) was not committed but %s', n.job_id, n.reason,
              concat_ws(', ',
                  CASE WHEN EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.id = n.job_id) THEN 'is in pgtask.jobs' END,
                  CASE WHEN EXISTS (SELECT 1 FROM pgtask_chaos.attempts a WHERE a.job_id = n.job_id) THEN 'has attempts' END,
                  CASE WHEN EXISTS (SELECT 1 FROM pgtask_chaos.effects f WHERE f.job_id = n.job_id) THEN 'has effects' END))
  FROM pgtask_chaos.not_committed n
 WHERE NOT EXISTS (SELECT 1 FROM pgtask_chaos.enqueued e WHERE e.job_id = n.job_id)
   AND (EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.id = n.job_id)
        OR EXISTS (SELECT 1 FROM pgtask_chaos.attempts a WHERE a.job_id = n.job_id)
        OR EXISTS (SELECT 1 FROM pgtask_chaos.effects f WHERE f.job_id = n.job_id))
ORDER BY 1, 2;

-- name: ObserveReusedIds :one
-- Ids handed out in a transaction that did not commit and then again in one
-- that did. A crash can do this: a transaction's nextval is made durable by
-- its commit, so when the server crashes before any commit has flushed it,
-- the sequence resumes from an earlier value and hands the ids out again.
-- The jobs committed under them are checked like any other.
SELECT count(*) AS reused
  FROM pgtask_chaos.not_committed n
 WHERE EXISTS (SELECT 1 FROM pgtask_chaos.enqueued e WHERE e.job_id = n.job_id);

-- name: CheckOverlaps :many
-- 2. No two attempts of a group, nor of one job, ran at the same time: taken
-- in start order, each attempt starts no earlier than the one before it
-- ended (a pair found both in its group and in its job is reported once).
-- An attempt with no end was cut off by the death of its process; it
-- is taken to end when that process was signalled (or when it started, if
-- later), a time at which the process was certainly alive; or, if its
-- handler failed because it could not confirm its start row (which then
-- committed after all), when that failure was recorded (in the handler's
-- words, or the worker's when the job's session was lost as well); see
-- pgtask_chaos.attempt_end, which CheckLimits shares. An attempt with no
-- end whose process was never killed is a violation too.
-- A lease-mode attempt taken over after its lease expired (its worker hung,
-- or was cut off from the database) may still be running when the next one
-- starts; only one of them records anything (check 4). Such a pair, where
-- the attempt claimed first (the job's earlier attempt, or the group's
-- earlier job) was taken over, has the kind 'overlap after lease takeover',
-- which the program reports as an observation, not a violation. The attempt
-- claimed first may be the one that started later: a worker that hung
-- between the claim and its handler's start records that start late.
WITH a AS (
    SELECT t.id, t.job_id, t.attempt, t.group_key, t.instance, t.started_at, t.ended_at,
           coalesce(e.seq, 0) AS seq,
           pgtask_chaos.attempt_end(t.job_id, t.attempt, t.instance, t.started_at, t.ended_at) AS end_at,
           pgtask_chaos.attempt_error_at(t.job_id, t.attempt, 'worker lost%') IS NOT NULL AS lost,
           pgtask_chaos.attempt_error_at(t.job_id, t.attempt, 'lease expired%') IS NOT NULL AS taken
      FROM pgtask_chaos.attempts t LEFT JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id
), pairs AS (
    SELECT 'group'::text AS scope, a.group_key AS key, a.id,
           lead(a.id) OVER (PARTITION BY a.group_key ORDER BY a.started_at, a.id) AS next_id
      FROM a WHERE a.group_key IS NOT NULL
    UNION ALL
    SELECT 'job', a.job_id::text, a.id,
           lead(a.id) OVER (PARTITION BY a.job_id ORDER BY a.started_at, a.id)
      FROM a
), clashes AS (
    SELECT DISTINCT ON (p.id, n.id) p.job_id,
           CASE WHEN p.taken OR (n.taken AND (n.seq, n.attempt) < (p.seq, p.attempt)) THEN 'overlap after lease takeover'
                WHEN p.lost THEN 'overlap after lost session'
                ELSE 'overlap' END::text AS kind,
           format('%s %s: job %s attempt %s (instance %s%s) ran %s..%s%s; job %s attempt %s (instance %s%s) started %s',
                  x.scope, x.key, p.job_id, p.attempt, p.instance,
                  CASE WHEN p.lost THEN ', session lost' WHEN p.taken THEN ', taken over' ELSE '' END,
                  to_char(p.started_at, 'HH24:MI:SS.US'), to_char(p.end_at, 'HH24:MI:SS.US'),
                  CASE WHEN p.ended_at IS NULL THEN ' (process killed)' ELSE '' END,
                  n.job_id, n.attempt, n.instance, CASE WHEN n.taken THEN ', taken over' ELSE '' END,
                  to_char(n.started_at, 'HH24:MI:SS.US'))::text AS detail
      FROM pairs x JOIN a p ON p.id = x.id JOIN a n ON n.id = x.next_id
     WHERE n.started_at < p.end_at
     ORDER BY p.id, n.id, x.scope
)
SELECT c.job_id, c.kind, c.detail FROM clashes c
UNION ALL
SELECT a.job_id, 'never ended',
       format('job %s attempt %s (instance %s) started %s, never ended, and its process was not killed',
              a.job_id, a.attempt, a.instance, to_char(a.started_at, 'HH24:MI:SS.US'))
  FROM a WHERE a.end_at IS NULL
ORDER BY 1, 2;

-- name: CheckLimits :many
-- 8. No limit key ran more of its jobs at once than its limit, across every
-- worker process, held and lease alike: at each start of an attempt of a
-- limited job, the attempts of its key running (see
-- pgtask_chaos.limit_running: an attempt counts from its start until its
-- handler ended, by the same reckoning as CheckOverlaps, or until it was
-- taken over) are at most the key's limit. Such a start over the limit
-- whose co-runners include an attempt that lost its session has the kind
-- 'over limit after lost session', a violation still. A start over the
-- limit only when taken-over attempts count until their handler ended
-- (lease mode's documented behaviour: a hung worker's handler may still
-- run while the job's next attempt does) has the kind 'over limit after
-- lease takeover', which the program reports as an observation, as it
-- does check 2's. And every limited job counts against the key it was
-- enqueued with (pgtask.jobs.limit_id).
WITH over AS (
    SELECT r.sweep, r.id, r.limit_key, r.limit_max, r.at, r.running
      FROM pgtask_chaos.limit_running r WHERE r.running > r.limit_max
)
SELECT t.job_id,
       CASE WHEN o.sweep = 'handler' THEN 'over limit after lease takeover'
            WHEN bool_or(s.lost) FILTER (WHERE s.id <> o.id) THEN 'over limit after lost session'
            ELSE 'over limit' END::text AS kind,
       format('key %s (limit %s): %s attempts ran at once at %s: %s',
              CASE WHEN o.limit_key = '' THEN '"" (the queue''s own)' ELSE quote_ident(o.limit_key) END,
              o.limit_max, o.running, to_char(o.at, 'HH24:MI:SS.US'),
              string_agg(format('job %s attempt %s (instance %s, %s%s) %s..%s',
                                s.job_id, s.attempt, s.instance, s.mode,
                                CASE WHEN s.lost THEN ', session lost' WHEN s.taken THEN ', taken over' ELSE '' END,
                                to_char(s.started_at, 'HH24:MI:SS.US'), to_char(s.until, 'HH24:MI:SS.US')),
                         '; ' ORDER BY s.started_at, s.id))::text AS detail
  FROM over o
  JOIN pgtask_chaos.attempts t ON t.id = o.id
  JOIN pgtask_chaos.limit_spans s ON s.sweep = o.sweep AND s.limit_key = o.limit_key
                                   AND s.started_at <= o.at AND s.until > o.at
 WHERE o.sweep = 'slot' OR NOT EXISTS (SELECT 1 FROM over o2 WHERE o2.sweep = 'slot' AND o2.id = o.id)
 GROUP BY t.job_id, o.sweep, o.id, o.limit_key, o.limit_max, o.running, o.at
UNION ALL
SELECT e.job_id, 'limit lost',
       format('job %s was enqueued with limit %s of key %s but counts against %s', e.job_id, e.limit_max, quote_literal(e.limit_key),
              coalesce((SELECT format('key %s of queue %s', quote_literal(k.limit_key), k.queue)
                          FROM pgtask.limit_keys k WHERE k.id = j.limit_id), 'none'))
  FROM pgtask_chaos.enqueued e JOIN pgtask.jobs j ON j.id = e.job_id
 WHERE e.limit_max IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pgtask.limit_keys k WHERE k.id = j.limit_id AND k.limit_key = e.limit_key AND k.queue = j.queue)
ORDER BY 1, 2;

-- name: LimitPeaks :many
-- Each limit key of the run's limited jobs: its limit, its jobs and their
-- attempts, and the most of its attempts that ran at once by check 8's
-- reckoning (peak) and counting taken-over attempts until their handler
-- ended (peak_handlers).
SELECT e.limit_key, max(e.limit_max)::integer AS limit_max, count(*)::bigint AS jobs,
       (SELECT count(*) FROM pgtask_chaos.attempts t JOIN pgtask_chaos.enqueued e2 ON e2.job_id = t.job_id
         WHERE e2.limit_max IS NOT NULL AND e2.limit_key = e.limit_key)::bigint AS attempts,
       coalesce((SELECT max(r.running) FROM pgtask_chaos.limit_running r
                  WHERE r.sweep = 'slot' AND r.limit_key = e.limit_key), 0)::bigint AS peak,
       coalesce((SELECT max(r.running) FROM pgtask_chaos.limit_running r
                  WHERE r.sweep = 'handler' AND r.limit_key = e.limit_key), 0)::bigint AS peak_handlers
  FROM pgtask_chaos.enqueued e
 WHERE e.limit_max IS NOT NULL
 GROUP BY e.limit_key
 ORDER BY e.limit_key;

-- name: CheckGroupOrder :many
-- 3. Within a group, jobs start in enqueue order: taken in the order of
-- their first attempt's start, the group's jobs have increasing sequence
-- numbers. Every attempt ran in the group its job was enqueued in.
WITH firsts AS (
    SELECT DISTINCT ON (t.job_id) t.job_id, t.group_key, t.started_at, t.attempt
      FROM pgtask_chaos.attempts t
     WHERE t.group_key IS NOT NULL
     ORDER BY t.job_id, t.started_at, t.id
), a AS (
    SELECT f.job_id, f.attempt, f.group_key, f.started_at, e.seq,
           lag(f.job_id) OVER w AS prev_job, lag(e.seq) OVER w AS prev_seq,
           lag(f.started_at) OVER w AS prev_started_at
      FROM firsts f JOIN pgtask_chaos.enqueued e ON e.job_id = f.job_id
    WINDOW w AS (PARTITION BY f.group_key ORDER BY f.started_at, f.job_id)
)
SELECT a.job_id, 'order'::text AS kind,
       format('group %s: job %s (seq %s) first started %s (attempt %s), after job %s (seq %s) first started %s',
              a.group_key, a.job_id, a.seq, to_char(a.started_at, 'HH24:MI:SS.US'), a.attempt,
              a.prev_job, a.prev_seq, to_char(a.prev_started_at, 'HH24:MI:SS.US'))::text AS detail
  FROM a WHERE a.seq < a.prev_seq
UNION ALL
SELECT t.job_id, 'group',
       format('job %s attempt %s ran in group %s but was enqueued in group %s',
              t.job_id, t.attempt, coalesce(t.group_key, '-'), coalesce(e.group_key, '-'))
  FROM pgtask_chaos.attempts t JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id
 WHERE t.group_key IS DISTINCT FROM e.group_key
ORDER BY 1, 2;

-- name: ObserveReplays :many
-- Not a check: attempts of a grouped job that started after a later job of
-- its group had already started. pgtask runs a group's head and the jobs
-- right behind it in one transaction; when that transaction is lost, the
-- earlier jobs run again after the later ones ran (first starts stay in
-- order, so check 3 holds). A lease-mode process paused between a claim and
-- its handler's start records that start late, after the attempt was taken
-- over and the group moved on.
WITH a AS (
    SELECT t.job_id, t.attempt, t.group_key, t.started_at, e.seq,
           max(e.seq) OVER w AS max_seq_before
      FROM pgtask_chaos.attempts t JOIN pgtask_chaos.enqueued e ON e.job_id = t.job_id
     WHERE t.group_key IS NOT NULL
    WINDOW w AS (PARTITION BY t.group_key ORDER BY t.started_at, t.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT a.job_id,
       format('group %s: job %s (seq %s) attempt %s started %s, after a job with seq %s had started',
              a.group_key, a.job_id, a.seq, a.attempt, to_char(a.started_at, 'HH24:MI:SS.US'), a.max_seq_before)::text AS detail
  FROM a WHERE a.seq < a.max_seq_before
ORDER BY a.started_at;

-- name: CheckEffects :many
-- 4. A job's effect committed at most once: exactly once, by its last
-- attempt, for a succeeded job; never for a failed one.
SELECT j.id AS job_id, 'effects'::text AS kind,
       format('job %s %s after %s attempts has %s committed effects (from attempts %s)',
              j.id, j.status, j.attempts, count(f.id), coalesce(string_agg(f.attempt::text, ',' ORDER BY f.id), '-'))::text AS detail
  FROM pgtask.jobs j LEFT JOIN pgtask_chaos.effects f ON f.job_id = j.id
 GROUP BY j.id
HAVING count(f.id) > 1
    OR (j.status = 'succeeded' AND (count(f.id) <> 1 OR max(f.attempt) <> j.attempts))
    OR (j.status <> 'succeeded' AND count(f.id) <> 0)
UNION ALL
SELECT f.job_id, 'orphan effect', format('effect of job %s attempt %s, which is not a job', f.job_id, f.attempt)
  FROM pgtask_chaos.effects f
 WHERE NOT EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.id = f.job_id)
ORDER BY 1, 2;

-- name: CheckAttempts :many
-- 5. Attempts counted (pgtask.jobs.attempts) are attempts made: each counted
-- attempt has a start row, or a "worker lost" entry in the job's error
-- history (claimed, then its session died before the handler started), or
-- a "lease expired" entry (claimed in lease mode, then taken over while its
-- worker hung before the handler recorded its start), or the error of a
-- handler that could not record its start (the database was away); no
-- attempt started beyond the count or twice; the error history holds one
-- entry for each failed attempt (all but a succeeded job's last; all of a
-- cancelled job's: the attempt an operator's cancel ended is recorded with
-- an entry, and a job cancelled while waiting to retry or to start keeps
-- the entries of the attempts it made); a poison job failed after exactly
-- its max_attempts.
WITH starts AS (
    SELECT t.job_id, t.attempt, count(*) AS n FROM pgtask_chaos.attempts t GROUP BY t.job_id, t.attempt
), errs AS (
    SELECT j.id AS job_id, (x->>'attempt')::integer AS attempt, x->>'error' AS error
      FROM pgtask.jobs j, jsonb_array_elements(j.errors) x
)
SELECT j.id AS job_id, 'not started'::text AS kind,
       format('job %s (%s after %s attempts): attempt %s was counted but no handler started it and no worker-lost or lease-expired entry explains it; errors %s',
              j.id, j.status, j.attempts, g.n, j.errors)::text AS detail
  FROM pgtask.jobs j, generate_series(1, j.attempts) g(n)
 WHERE NOT EXISTS (SELECT 1 FROM starts s WHERE s.job_id = j.id AND s.attempt = g.n)
   AND NOT EXISTS (SELECT 1 FROM errs e
                    WHERE e.job_id = j.id AND e.attempt = g.n
                      AND (e.error LIKE 'worker lost%' OR e.error LIKE 'lease expired%'
                           OR e.error LIKE '%chaos: start not recorded%'
                           -- cut short at its claim: a cancel was pending
                           OR e.error LIKE '%cancelled% before the attempt started'))
UNION ALL
SELECT s.job_id, 'not counted',
       format('job %s: a handler started attempt %s, but the job counts %s attempts', s.job_id, s.attempt, j.attempts)
  FROM starts s JOIN pgtask.jobs j ON j.id = s.job_id
 WHERE s.attempt < 1 OR s.attempt > j.attempts
UNION ALL
SELECT s.job_id, 'started twice', format('job %s: attempt %s started %s times', s.job_id, s.attempt, s.n)
  FROM starts s WHERE s.n > 1
UNION ALL
SELECT j.id, 'error history',
       format('job %s %s after %s attempts has error entries for attempts %s',
              j.id, j.status, j.attempts,
              coalesce((SELECT string_agg(x->>'attempt', ',' ORDER BY (x->>'attempt')::integer)
                          FROM jsonb_array_elements(j.errors) x), 'none'))
  FROM pgtask.jobs j
 WHERE j.status IN ('succeeded', 'failed', 'cancelled')
   -- Each job's own entries, not a look through every job's for each.
   AND (SELECT coalesce(array_agg((x->>'attempt')::integer ORDER BY (x->>'attempt')::integer), '{}')
          FROM jsonb_array_elements(j.errors) x)
       IS DISTINCT FROM
       (SELECT coalesce(array_agg(g.n ORDER BY g.n), '{}')
          FROM generate_series(1, j.attempts - CASE WHEN j.status = 'succeeded' THEN 1 ELSE 0 END) g(n))
UNION ALL
SELECT j.id, 'poison',
       format('poison job %s ended %s after %s attempts (max %s)', j.id, j.status, j.attempts, j.max_attempts)
  FROM pgtask_chaos.enqueued e JOIN pgtask.jobs j ON j.id = e.job_id
 WHERE e.behavior = 'poison' AND (j.status <> 'failed' OR j.attempts <> j.max_attempts)
ORDER BY 1, 2;

-- name: RateStarts :many
-- 9. The starts of the rate-limited jobs of queue @queue, by key: when the
-- claim that started each job's last attempt began (pgtask.jobs.started_at),
-- with the key's rate in force. A rate holds on every attempt's start, so
-- on these too: no span of a second may hold more than the key's burst
-- plus its rate's share of the span.
SELECT k.rate_key, k.rate, k.period_us, k.burst, j.started_at::timestamptz AS started_at
  FROM pgtask.rate_keys k
  JOIN pgtask.jobs j ON j.rate_id = k.id
 WHERE k.queue = @queue::text AND j.started_at IS NOT NULL
 ORDER BY k.rate_key, j.started_at;

-- name: WorkflowViolations :many
-- 10. Workflow steps against their parents and their workflow's cancel:
-- an attempt of a step that started while a parent of policy 'c' (After,
-- the default) or 'w' (OrCancelWorkflow) had not succeeded (it failed, was
-- cancelled, or had not finished), or before that parent's success was
-- recorded (its finished_at, in the transaction that committed it); an
-- attempt of a step that started before a parent of policy 'a' (Anyway)
-- had finished, one way or the other; a step succeeded while still
-- counting parents to wait for (its waits row); a note a finisher left
-- that no one applied; a step claimed after its workflow's cancel (by a
-- failure whose edge said so, or by an operator) committed: the claim of
-- its last attempt began (pgtask.jobs.started_at, the claim statement's
-- start, before its snapshot) after that transaction's commit time (an
-- earlier attempt was claimed earlier still), or, in held mode, on the
-- cancelling transaction's own session after it marked the workflow (its
-- at): a session runs one transaction at a time, so that claim was made in
-- the cancelling transaction itself, which sees its own mark. A claim in
-- another transaction between the mark and the commit is not held to the
-- mark: the cancel takes the steps' rows after it, skipping those a claim
-- holds, and such a claim may see them still queued. A commit time is
-- stamped just before the commit becomes visible, so a claim in that
-- moment could miss the cancel and be reported wrongly. A workflow
-- cancelled that was
-- meant to be neither by a failure nor by an operator, and one meant to be
-- that was not.
SELECT 'started though a parent had not succeeded'::text AS kind,
       format('workflow %s: job %s attempt %s started at %s; its parent %s (policy %s) is %s, finished at %s',
              a_job.workflow_id, a.job_id, a.attempt, a.started_at, p.id, e.policy, p.status, p.finished_at)::text AS detail
  FROM pgtask.workflow_edges e
  JOIN pgtask.jobs p ON p.id = e.parent
  JOIN pgtask.jobs a_job ON a_job.id = e.child
  JOIN pgtask_chaos.attempts a ON a.job_id = e.child
 WHERE e.policy IN ('c', 'w') AND (p.status <> 'succeeded' OR p.finished_at IS NULL)
UNION ALL
SELECT 'started before a parent succeeded',
       format('workflow %s: job %s attempt %s started at %s; its parent %s (policy %s) succeeded at %s',
              e.workflow_id, a.job_id, a.attempt, a.started_at, p.id, e.policy, p.finished_at)
  FROM pgtask.workflow_edges e
  JOIN pgtask.jobs p ON p.id = e.parent
  JOIN pgtask_chaos.attempts a ON a.job_id = e.child
 WHERE e.policy IN ('c', 'w') AND p.status = 'succeeded' AND a.started_at < p.finished_at
UNION ALL
SELECT 'started before a parent finished',
       format('workflow %s: job %s attempt %s started at %s; its parent %s (policy a) is %s, finished at %s',
              e.workflow_id, a.job_id, a.attempt, a.started_at, p.id, p.status, p.finished_at)
  FROM pgtask.workflow_edges e
  JOIN pgtask.jobs p ON p.id = e.parent
  JOIN pgtask_chaos.attempts a ON a.job_id = e.child
 WHERE e.policy = 'a' AND (p.status NOT IN ('succeeded', 'failed', 'cancelled') OR p.finished_at IS NULL
                           OR a.started_at < p.finished_at)
UNION ALL
SELECT 'succeeded while waiting for parents',
       format('job %s succeeded still waiting for %s parent(s)', w.job_id, w.remaining)
  FROM pgtask.workflow_waits w
  JOIN pgtask.jobs j ON j.id = w.job_id
 WHERE j.status = 'succeeded' AND (w.remaining <> 0 OR w.cancelled_by IS NOT NULL)
UNION ALL
SELECT 'note left', format('child %s: parent %s''s outcome %s never applied', n.child, n.parent, n.outcome)
  FROM pgtask.workflow_notes n
UNION ALL
SELECT 'started after its workflow''s cancel committed',
       format('workflow %s (cancelled by %s) committed its cancel at %s; its step %s (%s) was claimed for attempt %s at %s',
              c.workflow_id, CASE WHEN o.workflow_id IS NOT NULL AND o.marked THEN 'an operator' ELSE 'a failure' END,
              pg_xact_commit_timestamp(c.xid), j.id, j.status, j.attempts, j.started_at)
  FROM pgtask_chaos.workflow_cancels c
  JOIN pgtask.jobs j ON j.workflow_id = c.workflow_id
  LEFT JOIN pgtask_chaos.operator_cancels o ON o.workflow_id = c.workflow_id
 WHERE j.started_at > pg_xact_commit_timestamp(c.xid)
   -- A claim whose attempt was cut short before its handler ran (its
   -- workflow's cancel found at the claim) started nothing; one whose
   -- handler did record a start ran, whatever its error entry says.
   AND (NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.errors) x
                     WHERE (x->>'attempt')::integer = j.attempts
                       AND x->>'error' LIKE '%cancelled% before the attempt started')
        OR EXISTS (SELECT 1 FROM pgtask_chaos.attempts a WHERE a.job_id = j.id AND a.attempt = j.attempts))
UNION ALL
SELECT 'claimed in its workflow''s cancelling transaction',
       format('workflow %s was marked cancelled at %s by the transaction of session %s (committed at %s); that session claimed its step %s for attempt %s at %s',
              c.workflow_id, c.at, c.backend_pid, pg_xact_commit_timestamp(c.xid), j.id, j.attempts, j.started_at)
  FROM pgtask_chaos.workflow_cancels c
  JOIN pgtask.jobs j ON j.workflow_id = c.workflow_id
 WHERE j.started_at > c.at AND j.started_at <= pg_xact_commit_timestamp(c.xid)
   AND EXISTS (SELECT 1 FROM pgtask_chaos.attempts a
                WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.mode = 'held' AND a.backend_pid = c.backend_pid)
UNION ALL
SELECT 'cancel without a commit time',
       format('workflow %s was cancelled by transaction %s, whose commit time is not known (track_commit_timestamp is off?)',
              c.workflow_id, c.xid)
  FROM pgtask_chaos.workflow_cancels c
 WHERE pg_xact_commit_timestamp(c.xid) IS NULL
UNION ALL
SELECT 'cancelled unexpectedly',
       format('workflow %s was cancelled at %s, by neither a failure whose edge says so nor an operator', w.id, w.cancelled_at)
  FROM pgtask.workflows w
  LEFT JOIN pgtask_chaos.workflows x ON x.workflow_id = w.id
 WHERE w.cancelled_at IS NOT NULL
   AND NOT coalesce(x.cancel_expected, false)
   AND NOT EXISTS (SELECT 1 FROM pgtask_chaos.operator_cancels o WHERE o.workflow_id = w.id)
UNION ALL
SELECT 'not cancelled',
       format('workflow %s was meant to be cancelled (%s) but is not', x.workflow_id,
              CASE WHEN x.cancel_expected THEN 'a step whose edge says OrCancelWorkflow fails' ELSE 'an operator cancelled it' END)
  FROM pgtask_chaos.workflows x
  JOIN pgtask.workflows w ON w.id = x.workflow_id
 WHERE w.cancelled_at IS NULL
   AND (x.cancel_expected OR EXISTS (SELECT 1 FROM pgtask_chaos.operator_cancels o WHERE o.workflow_id = x.workflow_id))
UNION ALL
SELECT 'cancel not recorded',
       format('workflow %s was cancelled at %s, but no transaction marking it was seen', w.id, w.cancelled_at)
  FROM pgtask.workflows w
 WHERE w.cancelled_at IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pgtask_chaos.workflow_cancels c WHERE c.workflow_id = w.id)
ORDER BY 1, 2;

-- name: MissedOperatorCancels :many
-- The workflows an operator was to cancel whose cancel never committed: the
-- operator tried until the run ended, so each is a failure of the run (its
-- checks did not see that cancel).
SELECT x.workflow_id
  FROM pgtask_chaos.workflows x
 WHERE x.operator_cancel
   AND NOT EXISTS (SELECT 1 FROM pgtask_chaos.operator_cancels o WHERE o.workflow_id = x.workflow_id)
 ORDER BY x.workflow_id;

-- name: WorkflowTotals :one
-- The workflows and what their failures and cancels did: dependencies by
-- policy, workflows cancelled by a failure and by an operator, the steps
-- that ended cancelled, and the steps that ran after a parent of policy
-- 'a' had failed or been cancelled.
SELECT (SELECT count(*) FROM pgtask.workflows)::bigint AS workflows,
       (SELECT count(*) FROM pgtask.workflow_edges)::bigint AS edges,
       (SELECT count(*) FROM pgtask.workflow_edges WHERE policy = 'c')::bigint AS edges_cancel,
       (SELECT count(*) FROM pgtask.workflow_edges WHERE policy = 'a')::bigint AS edges_anyway,
       (SELECT count(*) FROM pgtask.workflow_edges WHERE policy = 'w')::bigint AS edges_workflow,
       (SELECT count(*) FROM pgtask.jobs WHERE workflow_id IS NOT NULL)::bigint AS steps,
       (SELECT count(*) FROM pgtask.jobs WHERE workflow_id IS NOT NULL AND status = 'failed')::bigint AS steps_failed,
       (SELECT count(*) FROM pgtask.jobs WHERE workflow_id IS NOT NULL AND status = 'cancelled')::bigint AS steps_cancelled,
       (SELECT count(DISTINCT e.child) FROM pgtask.workflow_edges e
          JOIN pgtask.jobs p ON p.id = e.parent JOIN pgtask.jobs c ON c.id = e.child
         WHERE e.policy = 'a' AND p.status IN ('failed', 'cancelled')
           AND EXISTS (SELECT 1 FROM pgtask_chaos.attempts a WHERE a.job_id = c.id))::bigint AS anyway_ran,
       (SELECT count(*) FROM pgtask_chaos.workflows x JOIN pgtask.workflows w ON w.id = x.workflow_id
         WHERE x.cancel_expected AND w.cancelled_at IS NOT NULL)::bigint AS cancelled_by_failure,
       (SELECT count(*) FROM pgtask_chaos.operator_cancels)::bigint AS operator_cancels,
       (SELECT count(*) FROM pgtask_chaos.operator_cancels WHERE marked)::bigint AS operator_marked,
       (SELECT count(*) FROM pgtask_chaos.operator_cancels o
         WHERE o.marked AND EXISTS (SELECT 1 FROM pgtask.jobs j
                                     WHERE j.workflow_id = o.workflow_id AND j.status = 'cancelled'))::bigint AS operator_cut_short;

-- name: CheckBatches :many
-- 11. Each batch's callbacks (runtime.EnqueueBatch with OnFinish and
-- OnFailure): OnFinish succeeded, with exactly one committed effect and one
-- committed record of its summary (callback_runs, written through
-- job.Tx()); no attempt of it started (its handler's start, after the
-- claim, after the release) before the batch's last job had finished (its
-- finished_at, committed before the batch could end) or before the batch
-- ended (pgtask.batches.finished_at, stamped in the transaction that
-- releases the callback), nor with a job unfinished or the batch not ended
-- now; its summary says finished, with the batch's jobs' outcomes as
-- counted now. OnFailure the same, exactly once, if and only if a job of
-- the batch failed for good: no attempt of it before the first failure's
-- finished_at, nor before the failure was found (failed_at, stamped in the
-- transaction that releases it); and its summary says not finished, with a
-- failure, and counts no more than the batch ended with; with no failure it
-- never ran and ended cancelled.
WITH b AS (
    SELECT x.batch_id, pb.on_finish, pb.on_failure, pb.finished_at AS ended_at, pb.failed_at AS failure_found_at,
           count(j.id) AS total,
           count(j.id) FILTER (WHERE j.status = 'succeeded') AS succeeded,
           count(j.id) FILTER (WHERE j.status = 'failed') AS failed,
           count(j.id) FILTER (WHERE j.status = 'cancelled') AS cancelled,
           count(j.id) FILTER (WHERE j.status NOT IN ('succeeded', 'failed', 'cancelled')) AS unfinished,
           max(j.finished_at) AS last_finished,
           min(j.finished_at) FILTER (WHERE j.status = 'failed') AS first_failed
      FROM pgtask_chaos.batches x
      JOIN pgtask.batches pb ON pb.id = x.batch_id
      LEFT JOIN pgtask.jobs j ON j.batch_id = x.batch_id AND j.id <> pb.on_finish AND j.id <> pb.on_failure
     GROUP BY x.batch_id, pb.on_finish, pb.on_failure, pb.finished_at, pb.failed_at
), k AS (
    SELECT b.batch_id, 'OnFinish'::text AS which, b.on_finish AS job_id FROM b
    UNION ALL
    SELECT b.batch_id, 'OnFailure'::text, b.on_failure FROM b
), cb AS (
    SELECT b.batch_id, b.ended_at, b.failure_found_at, b.total, b.succeeded, b.failed, b.cancelled, b.unfinished,
           b.last_finished, b.first_failed, k.which, k.job_id, cj.status, cj.attempts,
           (SELECT count(*) FROM pgtask_chaos.callback_runs r WHERE r.job_id = k.job_id) AS runs,
           (SELECT count(*) FROM pgtask_chaos.effects f WHERE f.job_id = k.job_id) AS effects,
           (SELECT min(a.started_at) FROM pgtask_chaos.attempts a WHERE a.job_id = k.job_id) AS first_start,
           (SELECT count(*) FROM pgtask_chaos.attempts a WHERE a.job_id = k.job_id) AS starts
      FROM k
      JOIN b ON b.batch_id = k.batch_id
      LEFT JOIN pgtask.jobs cj ON cj.id = k.job_id
)
SELECT cb.batch_id, 'not once'::text AS kind,
       format('batch %s: %s callback %s is %s after %s attempts, with %s committed runs and %s effects (want succeeded, 1 and 1)',
              cb.batch_id, cb.which, cb.job_id, coalesce(cb.status::text, 'missing'), cb.attempts, cb.runs, cb.effects)::text AS detail
  FROM cb
 WHERE (cb.which = 'OnFinish' OR cb.failed > 0)
   AND NOT (cb.status = 'succeeded' AND cb.runs = 1 AND cb.effects = 1)
UNION ALL
SELECT cb.batch_id, 'ran with no failure',
       format('batch %s: OnFailure callback %s is %s, with %s attempts started and %s committed runs, but no job of the batch failed',
              cb.batch_id, cb.job_id, coalesce(cb.status::text, 'missing'), cb.starts, cb.runs)
  FROM cb
 WHERE cb.which = 'OnFailure' AND cb.failed = 0 AND (cb.status IS DISTINCT FROM 'cancelled' OR cb.starts > 0 OR cb.runs > 0)
UNION ALL
SELECT cb.batch_id, 'started before the batch ended',
       format('batch %s: OnFinish callback %s first started at %s; the batch''s last job finished at %s, %s jobs unfinished, batch ended %s',
              cb.batch_id, cb.job_id, cb.first_start, cb.last_finished, cb.unfinished,
              coalesce('at ' || cb.ended_at::text, 'never'))
  FROM cb
 WHERE cb.which = 'OnFinish' AND cb.first_start IS NOT NULL
   AND (cb.unfinished > 0 OR cb.ended_at IS NULL OR cb.last_finished IS NULL
        OR cb.first_start < cb.last_finished OR cb.first_start < cb.ended_at)
UNION ALL
SELECT cb.batch_id, 'started before a failure',
       format('batch %s: OnFailure callback %s first started at %s; the batch''s first failure finished at %s, was found %s',
              cb.batch_id, cb.job_id, cb.first_start, cb.first_failed, coalesce('at ' || cb.failure_found_at::text, 'never'))
  FROM cb
 WHERE cb.which = 'OnFailure' AND cb.failed > 0 AND cb.first_start IS NOT NULL
   AND (cb.first_start < cb.first_failed OR cb.failure_found_at IS NULL OR cb.first_start < cb.failure_found_at)
UNION ALL
SELECT cb.batch_id, 'wrong summary',
       format('batch %s: %s callback %s (attempt %s) read total %s, succeeded %s, failed %s, cancelled %s, deleted %s, finished %s; the batch has total %s, succeeded %s, failed %s, cancelled %s',
              cb.batch_id, cb.which, cb.job_id, r.attempt, r.total, r.succeeded, r.failed, r.cancelled, r.deleted,
              CASE WHEN r.finished THEN 'true' ELSE 'false' END,
              cb.total, cb.succeeded, cb.failed, cb.cancelled)
  FROM cb JOIN pgtask_chaos.callback_runs r ON r.job_id = cb.job_id
 WHERE r.batch_id <> cb.batch_id OR r.total <> cb.total OR r.deleted <> 0
    OR (cb.which = 'OnFinish'
        AND NOT (r.finished AND r.succeeded = cb.succeeded AND r.failed = cb.failed AND r.cancelled = cb.cancelled))
    OR (cb.which = 'OnFailure'
        AND NOT (NOT r.finished AND r.failed >= 1 AND r.failed <= cb.failed
                 AND r.succeeded <= cb.succeeded AND r.cancelled <= cb.cancelled))
ORDER BY 1, 2;

-- name: BatchTotals :one
-- The batches: how many, with a failure, and their callbacks' runs.
SELECT (SELECT count(*) FROM pgtask_chaos.batches)::bigint AS batches,
       (SELECT coalesce(sum(jobs), 0) FROM pgtask_chaos.batches)::bigint AS jobs,
       (SELECT count(*) FROM pgtask_chaos.batches x JOIN pgtask.batches b ON b.id = x.batch_id
         WHERE EXISTS (SELECT 1 FROM pgtask.jobs j WHERE j.batch_id = x.batch_id AND j.status = 'failed'
                         AND j.id <> b.on_finish AND j.id <> b.on_failure))::bigint AS with_failure,
       (SELECT count(*) FROM pgtask_chaos.callback_runs r WHERE r.finished)::bigint AS finish_runs,
       (SELECT count(*) FROM pgtask_chaos.callback_runs r WHERE NOT r.finished)::bigint AS failure_runs,
       (SELECT count(*) FROM pgtask_chaos.attempts a JOIN pgtask_chaos.enqueued e ON e.job_id = a.job_id
         WHERE e.callback IS NOT NULL)::bigint AS callback_attempts;

-- name: InsertJobs :one
-- Inserts a batch of jobs in one round trip; see pgtask.enqueue_jobs. Each
-- job names its settings by their 1-based position in kinds..delay_us and
-- its group by its position in group_queues/group_keys (0: ungrouped); an
-- empty run_at means "now plus the delay". unique_keys has one per job
-- (empty for none, or NULL for none in the batch), unique_windows_us and
-- unique_statuses one per set of settings; metadata one per job (NULL for
-- none), or NULL for none in the batch. fair, like limits, names each job's
-- tenant by its position in fair_queues/fair_tenants (0: none), or is NULL
-- for none in the batch. limits, like groups, names each
-- job's limit by its position in limit_queues/limit_keys/limit_max (0:
-- none), or is NULL for none in the batch; rates names each job's rate
-- key by its position in rate_queues..rate_burst the same way.
SELECT e.job_ids::bigint[] AS ids, e.job_existed::boolean[] AS existed
  FROM pgtask.enqueue_jobs(
    @payloads::jsonb[], @settings::integer[], @groups::integer[],
    @kinds::text[], @queues::text[], @priorities::smallint[], @aging_ms::integer[], @max_attempts::integer[],
    @fail_blocks_group::boolean[], @run_at::text[], @delay_us::bigint[],
    @group_queues::text[], @group_keys::text[],
    @unique_keys::text[], @unique_windows_us::bigint[], @unique_statuses::text[],
    sqlc.narg(metadata)::jsonb[],
    sqlc.narg(limits)::integer[], @limit_queues::text[], @limit_keys::text[], @limit_max::integer[],
    @limit_strategies::text[],
    sqlc.narg(rates)::integer[], @rate_queues::text[], @rate_keys::text[], @rate_n::integer[],
    @rate_period_us::bigint[], @rate_burst::integer[],
    sqlc.narg(fair)::integer[], @fair_queues::text[], @fair_tenants::text[]
  ) e;

-- name: InsertBatch :one
-- Inserts a batch's callbacks (parked: see pgtask.parked_at) and jobs as
-- InsertJobs does, and makes the batch of them, in one statement; see
-- pgtask.create_batch. ids are the callbacks' then the jobs'.
SELECT e.job_ids::bigint[] AS ids,
       pgtask.create_batch(e.job_ids, e.job_existed, @on_finish::boolean, @on_failure::boolean)::bigint AS batch_id
  FROM pgtask.enqueue_jobs(
    @payloads::jsonb[], @settings::integer[], @groups::integer[],
    @kinds::text[], @queues::text[], @priorities::smallint[], @aging_ms::integer[], @max_attempts::integer[],
    @fail_blocks_group::boolean[], @run_at::text[], @delay_us::bigint[],
    @group_queues::text[], @group_keys::text[],
    @unique_keys::text[], @unique_windows_us::bigint[], @unique_statuses::text[],
    sqlc.narg(metadata)::jsonb[],
    sqlc.narg(limits)::integer[], @limit_queues::text[], @limit_keys::text[], @limit_max::integer[],
    @limit_strategies::text[],
    sqlc.narg(rates)::integer[], @rate_queues::text[], @rate_keys::text[], @rate_n::integer[],
    @rate_period_us::bigint[], @rate_burst::integer[],
    sqlc.narg(fair)::integer[], @fair_queues::text[], @fair_tenants::text[]
  ) e;

-- name: GetBatch :one
-- A batch and its counts: those recorded when it ended, or, while it is
-- open, its jobs' now (a job gone counts as deleted).
SELECT b.id, b.total, coalesce(b.on_finish, 0)::bigint AS on_finish, coalesce(b.on_failure, 0)::bigint AS on_failure,
       b.created_at, b.failed_at, b.finished_at,
       coalesce(b.succeeded, c.succeeded)::integer AS succeeded,
       coalesce(b.failed, c.failed)::integer AS failed,
       coalesce(b.cancelled, c.cancelled)::integer AS cancelled,
       coalesce(b.deleted, b.total - c.present)::integer AS deleted
  FROM pgtask.batches b
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE j.status = 'succeeded') AS succeeded,
              count(*) FILTER (WHERE j.status = 'failed') AS failed,
              count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
              count(*) AS present
         FROM pgtask.jobs j
        WHERE j.batch_id = b.id AND b.finished_at IS NULL) c
 WHERE b.id = @id;

-- name: InsertJob :one
-- Inserts one plain job; see pgtask.enqueue_job.
SELECT pgtask.enqueue_job(
    @payload::jsonb, @kind::text, @queue::text, @priority::smallint, @aging_ms::integer, @max_attempts::integer,
    @fail_blocks_group::boolean, @run_at::text, @delay_us::bigint
)::bigint AS id;
-- name: InsertWorkflow :one
-- Inserts a workflow's steps as InsertJobs does (those with parents
-- parked: see pgtask.parked_at), into the workflow it makes, with its
-- edges, in one statement; see pgtask.create_workflow. ids are the steps'
-- in order.
SELECT w.step_ids::bigint[] AS ids, w.new_workflow_id::bigint AS workflow_id
  FROM pgtask.create_workflow(
    @name::text, @edge_parents::integer[], @edge_children::integer[], @edge_policies::text[],
    @payloads::jsonb[], @settings::integer[], @groups::integer[],
    @kinds::text[], @queues::text[], @priorities::smallint[], @aging_ms::integer[], @max_attempts::integer[],
    @fail_blocks_group::boolean[], @run_at::text[], @delay_us::bigint[],
    @group_queues::text[], @group_keys::text[],
    @unique_keys::text[], @unique_windows_us::bigint[], @unique_statuses::text[],
    sqlc.narg(metadata)::jsonb[],
    sqlc.narg(limits)::integer[], @limit_queues::text[], @limit_keys::text[], @limit_max::integer[],
    @limit_strategies::text[],
    sqlc.narg(rates)::integer[], @rate_queues::text[], @rate_keys::text[], @rate_n::integer[],
    @rate_period_us::bigint[], @rate_burst::integer[],
    sqlc.narg(fair)::integer[], @fair_queues::text[], @fair_tenants::text[]
  ) w;

-- name: InsertJobs :one
-- Inserts a batch of jobs in one round trip; see pgtask.enqueue_jobs. Each
-- job names its settings by their 1-based position in kinds..delay_us and
-- its group by its position in group_queues/group_keys (0: ungrouped); an
-- empty run_at means "now plus the delay". unique_keys has one per job
-- (empty for none, or NULL for none in the batch), unique_windows_us and
-- unique_statuses one per set of settings; metadata one per job (NULL for
-- none), or NULL for none in the batch.
SELECT e.job_ids::bigint[] AS ids, e.job_existed::boolean[] AS existed
  FROM pgtask.enqueue_jobs(
    @payloads::jsonb[], @settings::integer[], @groups::integer[],
    @kinds::text[], @queues::text[], @priorities::smallint[], @aging_ms::integer[], @max_attempts::integer[],
    @fail_blocks_group::boolean[], @run_at::text[], @delay_us::bigint[],
    @group_queues::text[], @group_keys::text[],
    @unique_keys::text[], @unique_windows_us::bigint[], @unique_statuses::text[],
    sqlc.narg(metadata)::jsonb[]
  ) e;

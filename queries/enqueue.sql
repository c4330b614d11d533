-- name: InsertJobs :one
-- Inserts a batch of jobs in one round trip; see pgtask.enqueue_jobs. Each
-- job names its group by its 1-based position in group_queues/group_keys
-- (0: ungrouped); an empty run_at means "now plus the delay".
SELECT pgtask.enqueue_jobs(
    @kinds::text[], @queues::text[], @groups::integer[], @payloads::jsonb[],
    @priorities::smallint[], @max_attempts::integer[], @fail_blocks_group::boolean[],
    @run_at::text[], @delay_us::bigint[], @group_queues::text[], @group_keys::text[]
)::bigint[] AS ids;

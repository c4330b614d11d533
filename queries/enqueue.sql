-- name: InsertJobs :one
-- Inserts a batch of jobs in one round trip; see pgtask.enqueue_jobs. An
-- empty group key means an ungrouped job; an empty run_at means "now plus
-- the delay".
SELECT pgtask.enqueue_jobs(
    @kinds::text[], @queues::text[], @group_keys::text[], @payloads::jsonb[],
    @priorities::smallint[], @max_attempts::integer[], @fail_blocks_group::boolean[],
    @run_at::text[], @delay_us::bigint[]
)::bigint[] AS ids;

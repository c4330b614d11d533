-- name: InsertJobs :many
-- Inserts a batch of jobs in one statement. Ids are drawn in input order. For
-- each group in the batch the group row is created or locked (in key order, so
-- concurrent batches cannot deadlock on each other); the lock lasts until the
-- caller commits, which is what makes a worker finishing the group's head wait
-- for this job. A job is its group's head only when the group had none.
WITH input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('pgtask.jobs', 'id')) AS id, t.*
      FROM (SELECT unnest(@kinds::text[]) AS kind,
                   unnest(@queues::text[]) AS queue,
                   NULLIF(unnest(@group_keys::text[]), '') AS group_key,
                   unnest(@payloads::jsonb[]) AS payload,
                   unnest(@priorities::smallint[]) AS priority,
                   unnest(@max_attempts::integer[]) AS max_attempts,
                   unnest(@fail_blocks_group::boolean[]) AS fail_blocks_group,
                   NULLIF(unnest(@run_at::text[]), '')::timestamptz AS run_at,
                   unnest(@delay_us::bigint[]) AS delay_us) t
), timed AS (
    SELECT i.*, COALESCE(i.run_at, now() + i.delay_us * interval '1 microsecond') AS run_after
      FROM input i
), heads AS (
    INSERT INTO pgtask.queue_groups AS g (queue, group_key, head_id)
    SELECT queue, group_key, min(id)
      FROM input
     WHERE group_key IS NOT NULL
     GROUP BY queue, group_key
     ORDER BY queue, group_key
    ON CONFLICT (queue, group_key) DO UPDATE SET head_id = g.head_id
    RETURNING g.queue, g.group_key, g.head_id
)
INSERT INTO pgtask.jobs (
    id, queue, kind, group_key, is_head, status, priority, payload,
    max_attempts, fail_blocks_group, run_after
)
SELECT t.id, t.queue, t.kind, t.group_key,
       t.group_key IS NULL OR h.head_id = t.id,
       (CASE WHEN t.run_after > now() THEN 'scheduled' ELSE 'queued' END)::pgtask.job_status,
       t.priority, t.payload, t.max_attempts, t.fail_blocks_group, t.run_after
  FROM timed t
  LEFT JOIN heads h ON h.queue = t.queue AND h.group_key = t.group_key
 ORDER BY t.id
RETURNING id;

-- name: QueueDepths :many
-- Unfinished jobs per queue and status, and per queue how long its oldest
-- runnable job has waited (on the rows of status queued; 0 on the others):
-- what runtime/pgtaskotel's gauges report at each collection. Each branch
-- reads one partial index that holds only unfinished jobs (runnable heads,
-- queued jobs behind their group's head, scheduled jobs, running jobs), so
-- the cost follows the jobs waiting or running, not the finished ones kept
-- in the table, plus the entries those indexes keep of jobs that left them
-- until vacuum removes them. The jobs behind a head are found group by
-- group, by the ids of the groups there are now: the entries left of the
-- groups that emptied are never read. Ungrouped jobs are always heads, so
-- every queued job is in the first branch or the second, never both.
SELECT u.queue::text AS queue, u.status::text AS status, count(*)::bigint AS jobs,
       coalesce(extract(epoch FROM clock_timestamp() - min(u.run_after) FILTER (WHERE u.runnable)), 0)::float8 AS oldest_wait_seconds
  FROM (SELECT j.queue, j.status, j.run_after, true AS runnable
          FROM pgtask.jobs j WHERE j.status = 'queued' AND j.is_head
        UNION ALL
        SELECT j.queue, j.status, j.run_after, false
          FROM pgtask.queue_groups g
          JOIN pgtask.jobs j ON j.group_id = g.id
         WHERE j.group_id IS NOT NULL AND pgtask.job_pending(j.status) AND j.status = 'queued' AND NOT j.is_head
        UNION ALL
        SELECT j.queue, j.status, j.run_after, false FROM pgtask.jobs j WHERE j.status = 'scheduled'
        UNION ALL
        SELECT j.queue, j.status, j.run_after, false FROM pgtask.jobs j WHERE j.status = 'started') AS u
 GROUP BY u.queue, u.status
 ORDER BY u.queue, u.status;

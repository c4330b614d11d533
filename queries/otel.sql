-- name: QueueDepths :many
-- Unfinished jobs per queue, status and, for queued ones, what they wait
-- for (waiting_for: 'worker' for runnable heads, 'group' for jobs behind
-- their group's head, 'limit' for jobs waiting for a slot of their
-- concurrency limit, 'rate' for jobs waiting for a token of their rate
-- limit; '' for the other statuses), and per queue how long its
-- oldest runnable job has waited (on the rows of runnable jobs; 0 on the
-- others): what runtime/pgtaskotel's gauges report at each collection. Each
-- branch reads one partial index that holds only unfinished jobs (runnable
-- heads, queued jobs behind their group's head, jobs waiting on a limit,
-- scheduled jobs, running jobs), so the cost follows the jobs waiting or
-- running, not the finished ones kept in the table, plus the entries those
-- indexes keep of jobs that left them until vacuum removes them. The jobs
-- behind a head are found group by group, by the ids of the groups there
-- are now, and the jobs waiting on a limit key by key: the entries left of
-- the groups that emptied are never read. A queued job is a head, or
-- grouped behind one, or limited and not admitted (limited jobs are never
-- grouped), or rate-limited (never a head, grouped or limited): in exactly
-- one branch. Jobs waiting on a rate are found key by key, like those on a
-- limit.
SELECT u.queue::text AS queue, u.status::text AS status, u.waiting_for::text AS waiting_for, count(*)::bigint AS jobs,
       coalesce(extract(epoch FROM clock_timestamp() - min(u.run_after) FILTER (WHERE u.waiting_for = 'worker')), 0)::float8 AS oldest_wait_seconds
  FROM (SELECT j.queue, j.status, j.run_after, 'worker' AS waiting_for
          FROM pgtask.jobs j WHERE j.status = 'queued' AND j.is_head
        UNION ALL
        SELECT j.queue, j.status, j.run_after, 'group'
          FROM pgtask.queue_groups g
          JOIN pgtask.jobs j ON j.group_id = g.id
         WHERE j.group_id IS NOT NULL AND pgtask.job_pending(j.status) AND j.status = 'queued' AND NOT j.is_head
        UNION ALL
        SELECT j.queue, j.status, j.run_after, 'limit'
          FROM pgtask.limit_keys k
          JOIN pgtask.jobs j ON j.limit_id = k.id
         WHERE j.limit_id IS NOT NULL AND j.status = 'queued' AND NOT j.is_head
        UNION ALL
        SELECT j.queue, j.status, j.run_after, 'rate'
          FROM pgtask.rate_keys k
          JOIN pgtask.jobs j ON j.rate_id = k.id
         WHERE j.rate_id IS NOT NULL AND j.status = 'queued'
        UNION ALL
        SELECT j.queue, j.status, j.run_after, '' FROM pgtask.jobs j WHERE j.status = 'scheduled'
        UNION ALL
        SELECT j.queue, j.status, j.run_after, '' FROM pgtask.jobs j WHERE j.status = 'started') AS u
 GROUP BY u.queue, u.status, u.waiting_for
 ORDER BY u.queue, u.status, u.waiting_for;

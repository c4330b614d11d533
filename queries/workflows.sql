-- name: GetWorkflow :one
-- A workflow and its steps' counts by status, in one statement; steps
-- counts the jobs left (retention may have deleted some).
SELECT w.id, w.name, w.steps, w.edges, w.created_at, w.cancelled_at,
       count(j.id)::integer AS present,
       count(j.id) FILTER (WHERE j.status = 'scheduled' AND j.run_after = pgtask.parked_at())::integer AS waiting,
       count(j.id) FILTER (WHERE j.status IN ('scheduled', 'queued') AND NOT (j.status = 'scheduled' AND j.run_after = pgtask.parked_at()))::integer AS queued,
       count(j.id) FILTER (WHERE j.status = 'started')::integer AS started,
       count(j.id) FILTER (WHERE j.status = 'succeeded')::integer AS succeeded,
       count(j.id) FILTER (WHERE j.status = 'failed')::integer AS failed,
       count(j.id) FILTER (WHERE j.status = 'cancelled')::integer AS cancelled,
       coalesce(max(j.finished_at), w.created_at)::timestamptz AS last_finished_at
  FROM pgtask.workflows w
  LEFT JOIN pgtask.jobs j ON j.workflow_id = w.id
 WHERE w.id = @id
 GROUP BY w.id;

-- name: ListWorkflowSteps :many
-- A page of a workflow's steps in id order after @after_id, each with its
-- first 20 parents' ids, how many it has and how many it still waits for.
SELECT j.id, j.kind, j.queue, j.status, (j.status = 'scheduled' AND j.run_after = pgtask.parked_at())::boolean AS parked,
       j.attempts, j.created_at, j.started_at, j.finished_at,
       coalesce((SELECT array_agg(f.parent ORDER BY f.step)
                   FROM (SELECT e.parent, e.step FROM pgtask.workflow_edges e WHERE e.child = j.id ORDER BY e.step LIMIT 20) f),
                '{}')::bigint[] AS parents,
       (SELECT count(*) FROM pgtask.workflow_edges e WHERE e.child = j.id)::integer AS parent_count,
       coalesce((SELECT w.remaining FROM pgtask.workflow_waits w WHERE w.job_id = j.id), 0)::integer AS waiting_for
  FROM pgtask.jobs j
 WHERE j.workflow_id = @workflow_id::bigint AND j.id > @after_id::bigint
 ORDER BY j.id
 LIMIT @max::integer;

-- name: ListWorkflows :many
-- A page of workflows, newest first, before @before_id (0: from the
-- newest).
SELECT w.id, w.name, w.steps, w.created_at, w.cancelled_at
  FROM pgtask.workflows w
 WHERE @before_id::bigint = 0 OR w.id < @before_id::bigint
 ORDER BY w.id DESC
 LIMIT @max::integer;

-- name: JobParents :many
-- The parents of job @id in a workflow, with what it was told of each.
SELECT e.parent, e.step, e.policy::text AS policy, coalesce(e.outcome::text, '')::text AS outcome
  FROM pgtask.workflow_edges e
 WHERE e.child = @id
 ORDER BY e.step;

-- name: StepInput :one
-- The result of the parent that is step @step of job @id's workflow, with
-- its status, for a typed input (runtime.Input), and the job's workflow.
-- A NULL parent: no such parent (a NULL workflow: the job is of none); a
-- NULL status: the parent's job is gone (retention, or a delete).
SELECT c.workflow_id, e.parent, p.status, p.result
  FROM pgtask.jobs c
  LEFT JOIN pgtask.workflow_edges e ON e.child = c.id AND e.step = @step::integer
  LEFT JOIN pgtask.jobs p ON p.id = e.parent
 WHERE c.id = @id;

-- name: ApplyWorkflowNotes :one
-- See pgtask.apply_workflow_notes.
SELECT pgtask.apply_workflow_notes(sqlc.narg(children)::bigint[], @max::integer)::integer AS applied;

-- name: CancelPendingWorkflows :one
-- See pgtask.cancel_pending_workflows.
SELECT pgtask.cancel_pending_workflows(@max::integer)::integer AS pending;

-- name: CancelWorkflow :one
-- See pgtask.cancel_workflow.
SELECT pgtask.cancel_workflow(@id)::boolean AS cancelled;

-- name: DeleteFinishedWorkflows :one
-- See pgtask.delete_finished_workflows.
SELECT pgtask.delete_finished_workflows(@older_than_ms::bigint, @max::integer)::integer AS deleted;

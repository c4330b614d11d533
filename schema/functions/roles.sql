-- revision: 26
-- Least-privilege roles: what each of pgtask's roles may use, and the
-- functions that grant it (runtime.GrantRoles, `pgtask migrate -roles`).
--
-- Applied with CREATE OR REPLACE when this file's revision rises (see
-- schema/functions.go): raise it with every change.
--
-- Three roles, named by the user:
--   producer  enqueues, only through the enqueue functions, which run as
--             their owner (it has no privilege to write a table), and reads
--             jobs: all of them, or with "own jobs only" those its login
--             enqueued (row-level security on pgtask.jobs, by enqueued_by,
--             and likewise on pgtask.batches);
--   worker    works jobs: claims, settles, maintenance (which carries out
--             the cancel requests operators filed), the leader's duties
--             (retention, periodic jobs), and enqueues (periodic jobs,
--             handlers);
--   admin     operations: cancel, retry, delete, pause and resume, and
--             reading jobs, queues and statistics.
-- The owner of pgtask's schema migrates and grants. PUBLIC gets nothing.
--
-- A function a new revision adds gets no grant from PostgreSQL but
-- EXECUTE for PUBLIC. So every object is listed in role_privileges, and
-- Migrate calls regrant_roles after applying function files: when the
-- privileges differ from the list (role_grant_drift), it grants again.
--
-- These functions run with search_path pg_catalog (and pg_temp last, where
-- nothing is looked up): every pgtask object is named with its schema, and
-- the names they print come out schema-qualified, so that the statements
-- work in any session.

-- Every object of pgtask's schema, and the privileges each role has on it,
-- as GRANT spells them. An object that only the owner uses (functions that
-- run only inside a function running as the owner, trigger functions,
-- whose EXECUTE is not checked when they fire, and the tables of the
-- migration runner and of the grants) is listed with kind 'none'. A
-- function is listed by name: all its overloads get the privilege. An
-- object listed nowhere is granted to nobody, and role_grant_drift reports
-- it: list every function and table a change adds.
CREATE OR REPLACE FUNCTION pgtask.role_privileges()
RETURNS TABLE (kind text, object_type text, object_name text, privileges text)
LANGUAGE sql IMMUTABLE AS $$
    VALUES
    ('producer', 'schema', 'pgtask', 'USAGE'),
    ('worker', 'schema', 'pgtask', 'USAGE'),
    ('admin', 'schema', 'pgtask', 'USAGE'),

    -- Producers read jobs (GetJob, typed results, ListJobs); they write
    -- them only through the enqueue functions.
    ('producer', 'table', 'jobs', 'SELECT'),
    ('worker', 'table', 'jobs', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'jobs', 'SELECT, UPDATE, DELETE'),
    ('worker', 'table', 'queue_groups', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'queue_groups', 'SELECT, INSERT, UPDATE, DELETE'),
    -- Deleting jobs records groups it could not advance (the trigger runs
    -- as whoever deletes); maintenance moves them on.
    ('worker', 'table', 'stale_groups', 'SELECT, INSERT, UPDATE, DELETE'),
    ('admin', 'table', 'stale_groups', 'SELECT, INSERT'),
    ('worker', 'table', 'leaders', 'SELECT, INSERT, UPDATE, DELETE'),
    ('worker', 'table', 'paused_queues', 'SELECT'),
    ('admin', 'table', 'paused_queues', 'SELECT, INSERT, DELETE'),
    ('worker', 'table', 'periodic_ticks', 'SELECT, INSERT, DELETE'),
    ('worker', 'table', 'cancel_requests', 'SELECT, INSERT, UPDATE, DELETE'),
    -- A worker records the kinds it handles; an operator reads which
    -- runnable kinds no live worker handles.
    ('worker', 'table', 'worker_kinds', 'SELECT, INSERT, DELETE'),
    ('admin', 'table', 'worker_kinds', 'SELECT'),
    ('admin', 'table', 'cancel_requests', 'SELECT, INSERT, UPDATE, DELETE'),
    -- A worker writes its running jobs' progress; deleting jobs deletes
    -- theirs (the trigger runs as whoever deletes). Producers do not read
    -- it: the table has no row-level security, so "own jobs only" could
    -- not hold there.
    ('worker', 'table', 'job_progress', 'SELECT, INSERT, UPDATE, DELETE'),
    ('admin', 'table', 'job_progress', 'SELECT, DELETE'),
    -- A worker checks at start that the schema is as new as its code.
    -- Batches: producers make them through create_batch and read them
    -- (GetBatch); maintenance ends them, retention deletes them; an operator's retry of a job of
    -- an open batch moves the batch's cursor back.
    ('producer', 'table', 'batches', 'SELECT'),
    ('worker', 'table', 'batches', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'batches', 'SELECT, UPDATE'),
    ('none', 'sequence', 'batches_id_seq', ''),
    -- Concurrency limits (limits.sql): enqueues take slots inside
    -- enqueue_jobs; a job that ends frees its slot through the triggers,
    -- which run as whoever changes or deletes the job (a worker, or an
    -- operator's cancel, retry or delete); maintenance applies the checks
    -- they leave; an operator sets limits.
    ('worker', 'table', 'limit_keys', 'SELECT, UPDATE'),
    ('admin', 'table', 'limit_keys', 'SELECT, UPDATE'),
    ('worker', 'table', 'limit_checks', 'SELECT, INSERT, DELETE'),
    ('admin', 'table', 'limit_checks', 'INSERT'),
    ('worker', 'table', 'limit_overrides', 'SELECT'),
    ('admin', 'table', 'limit_overrides', 'SELECT, INSERT, UPDATE, DELETE'),
    ('none', 'sequence', 'limit_keys_id_seq', ''),
    ('none', 'sequence', 'limit_checks_id_seq', ''),
    -- Rate limits (rates.sql): enqueues create and mark keys inside
    -- enqueue_jobs; claims take tokens; a job that comes to wait marks its
    -- key ready through a trigger, which runs as whoever changes the job (a
    -- worker, or an operator's retry); maintenance applies the checks left;
    -- an operator sets rates.
    ('worker', 'table', 'rate_keys', 'SELECT, UPDATE'),
    ('admin', 'table', 'rate_keys', 'SELECT, UPDATE'),
    ('worker', 'table', 'rate_checks', 'SELECT, INSERT, DELETE'),
    ('admin', 'table', 'rate_checks', 'INSERT'),
    ('worker', 'table', 'rate_overrides', 'SELECT'),
    ('admin', 'table', 'rate_overrides', 'SELECT, INSERT, UPDATE, DELETE'),
    ('none', 'sequence', 'rate_keys_id_seq', ''),
    ('none', 'sequence', 'rate_checks_id_seq', ''),
    -- Fair queues (fair.sql): enqueues give turns inside enqueue_jobs;
    -- claims read which queues are fair, maintenance moves their clocks;
    -- an operator makes queues fair and sets tenants' weights.
    ('worker', 'table', 'fair_queues', 'SELECT, UPDATE'),
    ('admin', 'table', 'fair_queues', 'SELECT, INSERT, DELETE'),
    ('admin', 'table', 'fair_weights', 'SELECT, INSERT, UPDATE, DELETE'),
    ('worker', 'table', 'migrations', 'SELECT'),
    ('worker', 'table', 'function_files', 'SELECT'),
    ('none', 'table', 'granted_roles', ''),
    -- Rows get their ids from these inside functions running as the owner
    -- (jobs) or as identity columns, which need no privilege (groups).
    ('none', 'sequence', 'jobs_id_seq', ''),
    ('none', 'sequence', 'queue_groups_id_seq', ''),
    ('none', 'type', 'job_status', ''),

    -- Enqueueing (enqueue.sql): SECURITY DEFINER.
    ('producer', 'function', 'enqueue_jobs', 'EXECUTE'),
    ('worker', 'function', 'enqueue_jobs', 'EXECUTE'),
    ('producer', 'function', 'enqueue_job', 'EXECUTE'),
    ('worker', 'function', 'enqueue_job', 'EXECUTE'),
    ('none', 'function', 'share_lock_groups', ''),
    ('producer', 'function', 'create_batch', 'EXECUTE'),
    ('worker', 'function', 'create_batch', 'EXECUTE'),
    ('worker', 'function', 'finish_batches', 'EXECUTE'),
    ('worker', 'function', 'batch_summary', 'EXECUTE'),
    ('worker', 'function', 'batch_progress', 'EXECUTE'),
    ('worker', 'function', 'delete_finished_batches', 'EXECUTE'),
    ('worker', 'function', 'release_callbacks', 'EXECUTE'),
    ('worker', 'function', 'parked_at', 'EXECUTE'),
    ('none', 'function', 'is_list', ''),
    ('none', 'function', 'fair_turns', ''),

    -- Working (work.sql), maintenance (maintenance.sql), groups
    -- (groups.sql), the leader's duties (operations.sql).
    ('worker', 'function', 'scanned', 'EXECUTE'),
    ('worker', 'function', 'pick_heads', 'EXECUTE'),
    ('worker', 'function', 'pick_runs', 'EXECUTE'),
    ('worker', 'function', 'pick_limited_runs', 'EXECUTE'),
    ('worker', 'function', 'pick_fair_heads', 'EXECUTE'),
    ('worker', 'function', 'fair_clock', 'EXECUTE'),
    ('worker', 'function', 'advance_fair_clocks', 'EXECUTE'),
    ('admin', 'function', 'set_fair_queue', 'EXECUTE'),
    ('admin', 'function', 'set_tenant_weight', 'EXECUTE'),
    ('admin', 'function', 'fair_tenants', 'EXECUTE'),
    ('worker', 'function', 'claim_jobs', 'EXECUTE'),
    ('worker', 'function', 'claim_leased_jobs', 'EXECUTE'),
    ('worker', 'function', 'hold_jobs', 'EXECUTE'),
    ('worker', 'function', 'hold_claimed_jobs', 'EXECUTE'),
    ('worker', 'function', 'complete_jobs', 'EXECUTE'),
    ('worker', 'function', 'count_stale_outcomes', 'EXECUTE'),
    ('worker', 'function', 'settle_jobs', 'EXECUTE'),
    ('worker', 'function', 'settled_groups', 'EXECUTE'),
    ('worker', 'function', 'append_error', 'EXECUTE'),
    ('worker', 'function', 'fail_job', 'EXECUTE'),
    ('worker', 'function', 'hand_back', 'EXECUTE'),
    ('worker', 'function', 'extend_leases', 'EXECUTE'),
    ('worker', 'function', 'expire_leases', 'EXECUTE'),
    ('worker', 'function', 'promote_scheduled', 'EXECUTE'),
    ('worker', 'function', 'age_priorities', 'EXECUTE'),
    ('worker', 'function', 'rescue_orphans', 'EXECUTE'),
    ('worker', 'function', 'own_orphans', 'EXECUTE'),
    ('worker', 'function', 'rescue_jobs', 'EXECUTE'),
    ('worker', 'function', 'unwritable_row', 'EXECUTE'),
    ('worker', 'function', 'advance_one_group', 'EXECUTE'),
    ('worker', 'function', 'move_group_on', 'EXECUTE'),
    ('worker', 'function', 'advance_groups', 'EXECUTE'),
    ('worker', 'function', 'advance_finished_groups', 'EXECUTE'),
    ('worker', 'function', 'record_worker_kinds', 'EXECUTE'),
    ('worker', 'function', 'live_workers', 'EXECUTE'),
    ('admin', 'function', 'live_workers', 'EXECUTE'),
    ('worker', 'function', 'advance_each_group', 'EXECUTE'),
    -- Cancel requests an operator filed: a worker checks its running
    -- attempts against them and applies those whose attempt ended, with
    -- cancel_job.
    ('worker', 'function', 'cancel_requested', 'EXECUTE'),
    ('worker', 'function', 'apply_cancel_requests', 'EXECUTE'),
    ('worker', 'function', 'cancel_job', 'EXECUTE'),
    ('worker', 'function', 'elect', 'EXECUTE'),
    ('worker', 'function', 'resign', 'EXECUTE'),
    ('worker', 'function', 'delete_finished_jobs', 'EXECUTE'),
    ('worker', 'function', 'take_periodic_tick', 'EXECUTE'),
    ('worker', 'function', 'worker_lock_class', 'EXECUTE'),
    ('worker', 'function', 'unique_lock_class', 'EXECUTE'),
    -- Announcing idle runners (listen.go), and finding the enqueues in flight.
    ('worker', 'function', 'idle_lock_class', 'EXECUTE'),
    ('worker', 'function', 'enqueue_lock_class', 'EXECUTE'),
    ('none', 'function', 'advance_after_delete', ''),
    ('none', 'function', 'limit_unadmit', ''),
    ('none', 'function', 'limit_release', ''),
    ('none', 'function', 'limit_waits', ''),
    ('worker', 'function', 'check_limits', 'EXECUTE'),
    ('worker', 'function', 'pick_admitted', 'EXECUTE'),
    ('worker', 'function', 'hand_on_slots', 'EXECUTE'),
    ('worker', 'function', 'wake_for_limit', 'EXECUTE'),
    ('worker', 'function', 'wake_for_ready_keys', 'EXECUTE'),
    ('worker', 'function', 'limit_arm', 'EXECUTE'),
    ('admin', 'function', 'hand_on_slots', 'EXECUTE'),
    ('admin', 'function', 'wake_for_limit', 'EXECUTE'),
    ('admin', 'function', 'limit_arm', 'EXECUTE'),
    ('worker', 'function', 'release_slot', 'EXECUTE'),
    ('worker', 'function', 'release_slots', 'EXECUTE'),
    ('worker', 'function', 'release_deferred_slots', 'EXECUTE'),
    ('worker', 'function', 'pass_on_in_run', 'EXECUTE'),
    ('worker', 'function', 'admit_waiting_ids', 'EXECUTE'),
    ('worker', 'function', 'announce_admitted_ids', 'EXECUTE'),
    ('worker', 'function', 'limit_in_force', 'EXECUTE'),
    ('admin', 'function', 'release_slot', 'EXECUTE'),
    ('admin', 'function', 'release_slots', 'EXECUTE'),
    ('admin', 'function', 'pass_on_in_run', 'EXECUTE'),
    ('admin', 'function', 'admit_waiting_ids', 'EXECUTE'),
    ('admin', 'function', 'announce_admitted_ids', 'EXECUTE'),
    ('admin', 'function', 'limit_in_force', 'EXECUTE'),
    ('admin', 'function', 'set_limit', 'EXECUTE'),
    ('none', 'function', 'rate_unhead', ''),
    ('none', 'function', 'rate_waits', ''),
    ('worker', 'function', 'start_held', 'EXECUTE'),
    ('worker', 'function', 'cancel_claimed', 'EXECUTE'),
    ('worker', 'function', 'leave_promoted', 'EXECUTE'),
    ('worker', 'function', 'pick_rated', 'EXECUTE'),
    ('worker', 'function', 'rate_wait_us', 'EXECUTE'),
    ('worker', 'function', 'rated_queues', 'EXECUTE'),
    ('worker', 'function', 'check_rates', 'EXECUTE'),
    ('worker', 'function', 'rate_arm', 'EXECUTE'),
    ('worker', 'function', 'rate_tokens', 'EXECUTE'),
    ('worker', 'function', 'rate_token_at', 'EXECUTE'),
    ('worker', 'function', 'rate_in_force', 'EXECUTE'),
    ('admin', 'function', 'rate_arm', 'EXECUTE'),
    ('admin', 'function', 'rate_tokens', 'EXECUTE'),
    ('admin', 'function', 'rate_token_at', 'EXECUTE'),
    ('admin', 'function', 'rate_in_force', 'EXECUTE'),
    ('admin', 'function', 'default_rate_burst', 'EXECUTE'),
    ('admin', 'function', 'set_rate', 'EXECUTE'),
    ('none', 'function', 'forget_groups_after_truncate', ''),

    -- Workflows (workflows.sql): producers make them through
    -- create_workflow and read them (GetWorkflow); a step's finish tells
    -- its children through the triggers, which run as whoever changes or
    -- deletes the job (a worker, or an operator's cancel, retry or
    -- delete); maintenance applies the notes left and finishes cancelling
    -- cancelled workflows; retention deletes them; an operator cancels
    -- them and reads their steps.
    ('producer', 'table', 'workflows', 'SELECT'),
    ('worker', 'table', 'workflows', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'workflows', 'SELECT, UPDATE'),
    ('worker', 'table', 'workflow_edges', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'workflow_edges', 'SELECT, UPDATE'),
    ('worker', 'table', 'workflow_waits', 'SELECT, UPDATE, DELETE'),
    ('admin', 'table', 'workflow_waits', 'SELECT, UPDATE'),
    ('worker', 'table', 'workflow_notes', 'SELECT, INSERT, DELETE'),
    ('admin', 'table', 'workflow_notes', 'SELECT, INSERT, DELETE'),
    ('none', 'sequence', 'workflows_id_seq', ''),
    ('none', 'sequence', 'workflow_notes_id_seq', ''),
    ('producer', 'function', 'create_workflow', 'EXECUTE'),
    ('worker', 'function', 'create_workflow', 'EXECUTE'),
    ('none', 'function', 'workflow_step_done', ''),
    ('none', 'function', 'workflow_step_again', ''),
    ('none', 'function', 'workflow_step_repark', ''),
    ('worker', 'function', 'workflow_steps_changed', 'EXECUTE'),
    ('admin', 'function', 'workflow_steps_changed', 'EXECUTE'),
    ('worker', 'function', 'workflow_queue_add', 'EXECUTE'),
    ('admin', 'function', 'workflow_queue_add', 'EXECUTE'),
    ('worker', 'function', 'workflow_queue_take', 'EXECUTE'),
    ('admin', 'function', 'workflow_queue_take', 'EXECUTE'),
    ('worker', 'function', 'workflow_work_queue', 'EXECUTE'),
    ('admin', 'function', 'workflow_work_queue', 'EXECUTE'),
    ('worker', 'function', 'workflow_settle', 'EXECUTE'),
    ('admin', 'function', 'workflow_settle', 'EXECUTE'),
    ('worker', 'function', 'workflow_apply_locked', 'EXECUTE'),
    ('admin', 'function', 'workflow_apply_locked', 'EXECUTE'),
    ('worker', 'function', 'workflow_tell_locked', 'EXECUTE'),
    ('admin', 'function', 'workflow_tell_locked', 'EXECUTE'),
    ('worker', 'function', 'workflow_edges_to_tell', 'EXECUTE'),
    ('admin', 'function', 'workflow_edges_to_tell', 'EXECUTE'),
    ('worker', 'function', 'workflow_release', 'EXECUTE'),
    ('admin', 'function', 'workflow_release', 'EXECUTE'),
    ('worker', 'function', 'workflow_cancel_unstarted', 'EXECUTE'),
    ('admin', 'function', 'workflow_cancel_unstarted', 'EXECUTE'),
    ('admin', 'function', 'workflow_restore', 'EXECUTE'),
    ('worker', 'function', 'workflow_cancel', 'EXECUTE'),
    ('admin', 'function', 'workflow_cancel', 'EXECUTE'),
    ('worker', 'function', 'workflow_cancel_steps', 'EXECUTE'),
    ('admin', 'function', 'workflow_cancel_steps', 'EXECUTE'),
    ('worker', 'function', 'workflow_settle_deferred', 'EXECUTE'),
    ('worker', 'function', 'apply_workflow_notes', 'EXECUTE'),
    ('worker', 'function', 'cancel_pending_workflows', 'EXECUTE'),
    ('worker', 'function', 'delete_finished_workflows', 'EXECUTE'),
    ('admin', 'function', 'cancel_workflow', 'EXECUTE'),
    ('admin', 'function', 'parked_at', 'EXECUTE'),
    -- GetWorkflow tells the steps waiting for their parents by it.
    ('producer', 'function', 'parked_at', 'EXECUTE'),

    -- What both workers and operators' changes use: advancing a group (also
    -- from the trigger of a DELETE), and the checks and predicates.
    ('worker', 'function', 'advance_group', 'EXECUTE'),
    ('worker', 'function', 'advance_group_set', 'EXECUTE'),
    ('worker', 'function', 'group_head', 'EXECUTE'),
    ('worker', 'function', 'require_read_committed', 'EXECUTE'),
    ('worker', 'function', 'job_pending', 'EXECUTE'),
    ('worker', 'function', 'job_blocks_group', 'EXECUTE'),
    ('worker', 'function', 'job_releases_group', 'EXECUTE'),
    ('worker', 'function', 'pause_lock_class', 'EXECUTE'),
    ('admin', 'function', 'advance_group', 'EXECUTE'),
    ('admin', 'function', 'advance_group_set', 'EXECUTE'),
    ('admin', 'function', 'group_head', 'EXECUTE'),
    ('admin', 'function', 'require_read_committed', 'EXECUTE'),
    ('admin', 'function', 'job_pending', 'EXECUTE'),
    ('admin', 'function', 'job_blocks_group', 'EXECUTE'),
    ('admin', 'function', 'job_releases_group', 'EXECUTE'),
    ('admin', 'function', 'pause_lock_class', 'EXECUTE'),

    -- An operator's changes (admin.sql, operations.sql).
    ('admin', 'function', 'lock_job_for_change', 'EXECUTE'),
    ('admin', 'function', 'cancel_job', 'EXECUTE'),
    ('admin', 'function', 'cancel_jobs', 'EXECUTE'),
    ('admin', 'function', 'retry_job', 'EXECUTE'),
    ('admin', 'function', 'retry_jobs', 'EXECUTE'),
    -- A retry locks its job's unique key as an enqueue does, and marks
    -- itself in the job's error history.
    ('admin', 'function', 'unique_lock_class', 'EXECUTE'),
    ('admin', 'function', 'append_error', 'EXECUTE'),
    ('admin', 'function', 'delete_jobs', 'EXECUTE'),
    ('admin', 'function', 'pause_queue', 'EXECUTE'),
    ('admin', 'function', 'resume_queue', 'EXECUTE'),

    -- This file: the owner's.
    ('none', 'function', 'role_privileges', ''),
    ('none', 'function', 'role_objects', ''),
    ('none', 'function', 'role_grant_drift', ''),
    ('none', 'function', 'grant_roles', ''),
    ('none', 'function', 'regrant_roles', ''),
    ('none', 'function', 'drop_roles', '')
$$;

-- Every object of pgtask's schema that has privileges: its type and name
-- as role_privileges lists it, the keyword and the schema-qualified name
-- GRANT takes, and its privileges (PostgreSQL's default for its owner when
-- none were ever granted: PUBLIC may run a function, and use a type).
CREATE OR REPLACE FUNCTION pgtask.role_objects()
RETURNS TABLE (object_type text, object_name text, keyword text, target text, acl aclitem[])
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'schema', n.nspname::text, 'SCHEMA', quote_ident(n.nspname), coalesce(n.nspacl, acldefault('n', n.nspowner))
      FROM pg_namespace n
     WHERE n.nspname = 'pgtask'
    UNION ALL
    SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END, c.relname::text,
           CASE WHEN c.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.oid::regclass::text,
           coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))
      FROM pg_class c
     WHERE c.relnamespace = 'pgtask'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
    UNION ALL
    SELECT 'function', p.proname::text, CASE WHEN p.prokind = 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
           p.oid::regprocedure::text, coalesce(p.proacl, acldefault('f', p.proowner))
      FROM pg_proc p
     WHERE p.pronamespace = 'pgtask'::regnamespace
    UNION ALL
    SELECT 'type', t.typname::text, 'TYPE', t.oid::regtype::text, coalesce(t.typacl, acldefault('T', t.typowner))
      FROM pg_type t
     WHERE t.typnamespace = 'pgtask'::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')
$$;

-- How the privileges of PUBLIC and of the recorded roles (granted_roles)
-- on pgtask's objects differ from those role_privileges gives them: a row
-- per privilege held but not listed, or listed but not held (grantee and
-- privilege set), and a row per object role_privileges does not list
-- (grantee and privilege NULL). Empty when no roles are recorded.
CREATE OR REPLACE FUNCTION pgtask.role_grant_drift()
RETURNS TABLE (target text, grantee text, privilege text, problem text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH recorded AS (
        SELECT k.kind, r.oid AS role_oid
          FROM pgtask.granted_roles g
         CROSS JOIN LATERAL (VALUES ('producer', g.producer), ('worker', g.worker), ('admin', g.admin)) AS k(kind, name)
          JOIN pg_roles r ON r.rolname = k.name
    ), objects AS (
        SELECT o.object_type, o.object_name, o.keyword || ' ' || o.target AS target, o.acl
          FROM pgtask.role_objects() o
    ), listed AS (
        SELECT * FROM pgtask.role_privileges()
    ), held AS (
        SELECT o.target, a.grantee, a.privilege_type AS privilege
          FROM objects o
         CROSS JOIN LATERAL aclexplode(o.acl) a
         WHERE a.grantee = 0 OR a.grantee IN (SELECT role_oid FROM recorded)
    ), meant AS (
        SELECT o.target, r.role_oid AS grantee, p.privilege
          FROM objects o
          JOIN listed l ON l.object_type = o.object_type AND l.object_name = o.object_name
          JOIN recorded r ON r.kind = l.kind
         CROSS JOIN LATERAL unnest(string_to_array(l.privileges, ', ')) AS p(privilege)
    )
    SELECT d.target, d.grantee, d.privilege, d.problem
      FROM (
        SELECT x.target, CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE x.grantee::regrole::text END AS grantee,
               x.privilege, 'held, but role_privileges does not give it' AS problem
          FROM (SELECT * FROM held EXCEPT SELECT * FROM meant) x
        UNION ALL
        SELECT x.target, x.grantee::regrole::text, x.privilege, 'role_privileges gives it, but it is not held'
          FROM (SELECT * FROM meant EXCEPT SELECT * FROM held) x
        UNION ALL
        SELECT o.target, NULL, NULL, 'role_privileges does not list it: no role may use it'
          FROM objects o
         WHERE EXISTS (SELECT 1 FROM pgtask.granted_roles)
           AND NOT EXISTS (SELECT 1 FROM listed l WHERE l.object_type = o.object_type AND l.object_name = o.object_name)
      ) d
     ORDER BY d.target, d.grantee, d.privilege
$$;

-- Gives the producer, worker and admin roles named (NULL: none) the
-- privileges role_privileges lists, and no others on pgtask's objects, and
-- takes every privilege on them from PUBLIC and from the roles recorded
-- before that are no longer named. With p_own_jobs_only, producers read
-- only the jobs and batches their login enqueued: row-level security on
-- pgtask.jobs and pgtask.batches, a policy per role (workers and admins
-- see every row). With p_create,
-- roles that do not exist are created, as LOGIN roles without a password
-- (set one, or let them log in another way). With p_apply the statements
-- run, the roles are recorded in granted_roles, and the statements are
-- returned; without it they are only returned, as they would run now.
--
-- Grants and revokes lock no table. Row-level security is switched, and a
-- policy created or dropped, only when it is not as asked: those lock
-- pgtask.jobs (or pgtask.batches) against everyone until the transaction
-- ends, so the caller bounds its wait (lock_timeout), as a migration does. Role names are
-- quoted with format('%I'); nothing else comes from the caller.
CREATE OR REPLACE FUNCTION pgtask.grant_roles(p_producer text, p_worker text, p_admin text,
                                              p_own_jobs_only boolean, p_create boolean, p_apply boolean)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- The kinds and their roles, in that order; named ones only.
    kinds text[];
    names text[];
    owner_name text;
    everyone text;
    statements text[] := '{}';
    policies text[] := '{}';
    rls_on boolean;
    tab text;
    pol record;
    k record;
    o record;
    s text;
BEGIN
    p_producer := nullif(p_producer, '');
    p_worker := nullif(p_worker, '');
    p_admin := nullif(p_admin, '');
    SELECT array_agg(v.kind ORDER BY v.ord), array_agg(v.name ORDER BY v.ord) INTO kinds, names
      FROM (VALUES (1, 'producer', p_producer), (2, 'worker', p_worker), (3, 'admin', p_admin)) AS v(ord, kind, name)
     WHERE v.name IS NOT NULL;
    IF kinds IS NULL THEN
        RAISE EXCEPTION 'pgtask.grant_roles: name at least one role: the producer, the worker or the admin'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT r.rolname::text INTO owner_name
      FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner
     WHERE n.nspname = 'pgtask';
    FOR k IN SELECT * FROM unnest(kinds, names) AS u(kind, name) LOOP
        IF k.name IN ('public', 'none') THEN
            RAISE EXCEPTION 'pgtask.grant_roles: the % role cannot be named %: the name is reserved', k.kind, k.name
                USING ERRCODE = 'reserved_name';
        END IF;
        IF k.name = owner_name THEN
            RAISE EXCEPTION 'pgtask.grant_roles: the % role % owns pgtask''s schema and must keep every privilege on it; give the % a role of its own',
                k.kind, k.name, k.kind
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = k.name) THEN
            IF p_create THEN
                IF NOT format('CREATE ROLE %I LOGIN', k.name) = ANY (statements) THEN
                    statements := statements || format('CREATE ROLE %I LOGIN', k.name);
                END IF;
            ELSIF p_apply THEN
                RAISE EXCEPTION 'pgtask.grant_roles: the % role % does not exist: create it, or have it created (pgtask migrate -create-roles, runtime.Roles.Create)',
                    k.kind, k.name
                    USING ERRCODE = 'undefined_object';
            END IF;
        END IF;
    END LOOP;

    -- Take everything from PUBLIC, the roles named, and those recorded
    -- before that still exist, then give each named role its part.
    SELECT 'PUBLIC' || coalesce(', ' || string_agg(format('%I', r.name), ', ' ORDER BY r.first, r.name), '') INTO everyone
      FROM (SELECT u.name, min(u.ord) AS first
              FROM (SELECT n.name, n.ord FROM unnest(names) WITH ORDINALITY AS n(name, ord)
                    UNION ALL
                    SELECT g.name, 10 FROM pgtask.granted_roles gr
                     CROSS JOIN LATERAL (VALUES (gr.producer), (gr.worker), (gr.admin)) AS g(name)
                     WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.name)) u
             GROUP BY u.name) r;
    statements := statements
        || ('REVOKE ALL ON SCHEMA pgtask FROM ' || everyone)
        || ('REVOKE ALL ON ALL TABLES IN SCHEMA pgtask FROM ' || everyone)
        || ('REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgtask FROM ' || everyone)
        || ('REVOKE ALL ON ALL ROUTINES IN SCHEMA pgtask FROM ' || everyone);
    FOR o IN SELECT * FROM pgtask.role_objects() ro WHERE ro.object_type = 'type' ORDER BY ro.target LOOP
        statements := statements || format('REVOKE ALL ON TYPE %s FROM %s', o.target, everyone);
    END LOOP;

    FOR k IN SELECT * FROM unnest(kinds, names) AS u(kind, name) LOOP
        FOR o IN
            SELECT ro.keyword, ro.target, l.privileges
              FROM pgtask.role_objects() ro
              JOIN pgtask.role_privileges() l ON l.object_type = ro.object_type AND l.object_name = ro.object_name
             WHERE l.kind = k.kind AND ro.object_type NOT IN ('function')
             ORDER BY ro.object_type <> 'schema', ro.target
        LOOP
            statements := statements || format('GRANT %s ON %s %s TO %I', o.privileges, o.keyword, o.target, k.name);
        END LOOP;
        SELECT 'GRANT EXECUTE ON FUNCTION' || E'\n    ' || string_agg(ro.target, E',\n    ' ORDER BY ro.target)
               || format(E'\n    TO %I', k.name)
          INTO s
          FROM pgtask.role_objects() ro
          JOIN pgtask.role_privileges() l ON l.object_type = ro.object_type AND l.object_name = ro.object_name
         WHERE l.kind = k.kind AND ro.object_type = 'function';
        IF s IS NOT NULL THEN
            statements := statements || s;
        END IF;
    END LOOP;

    -- Row-level security, on the jobs, the batches and the workflows: a
    -- policy per role, created or dropped only when not as asked, since
    -- either locks the table.
    FOREACH tab IN ARRAY ARRAY['jobs', 'batches', 'workflows'] LOOP
        policies := '{}';
        FOR pol IN
            SELECT v.policy, v.role_name, v.rule,
                   p_own_jobs_only AND v.role_name IS NOT NULL AS wanted,
                   (SELECT p.polroles FROM pg_policy p
                     WHERE p.polrelid = format('pgtask.%I', tab)::regclass AND p.polname = v.policy) AS has_roles,
                   ARRAY(SELECT r.oid FROM pg_roles r WHERE r.rolname = v.role_name) AS wants_roles
              FROM (VALUES
                    ('pgtask_producer_own_' || tab, p_producer, 'FOR SELECT TO %I USING (enqueued_by = session_user)'),
                    ('pgtask_worker_all_' || tab, p_worker, 'FOR ALL TO %I USING (true) WITH CHECK (true)'),
                    ('pgtask_admin_all_' || tab, p_admin, 'FOR ALL TO %I USING (true) WITH CHECK (true)')
                   ) AS v(policy, role_name, rule)
        LOOP
            IF pol.has_roles IS NOT NULL AND NOT (pol.wanted AND pol.has_roles = pol.wants_roles) THEN
                policies := policies || format('DROP POLICY %I ON pgtask.%I', pol.policy, tab);
            END IF;
            IF pol.wanted AND (pol.has_roles IS NULL OR pol.has_roles <> pol.wants_roles) THEN
                policies := policies || (format('CREATE POLICY %I ON pgtask.%I ', pol.policy, tab) || format(pol.rule, pol.role_name));
            END IF;
        END LOOP;
        SELECT c.relrowsecurity INTO rls_on FROM pg_class c WHERE c.oid = format('pgtask.%I', tab)::regclass;
        IF p_own_jobs_only AND NOT rls_on THEN
            statements := statements || policies || format('ALTER TABLE pgtask.%I ENABLE ROW LEVEL SECURITY', tab);
        ELSIF NOT p_own_jobs_only AND rls_on THEN
            statements := statements || format('ALTER TABLE pgtask.%I DISABLE ROW LEVEL SECURITY', tab) || policies;
        ELSE
            statements := statements || policies;
        END IF;
    END LOOP;

    IF p_apply THEN
        FOREACH s IN ARRAY statements LOOP
            EXECUTE s;
        END LOOP;
        INSERT INTO pgtask.granted_roles AS g (producer, worker, admin, own_jobs_only)
        VALUES (p_producer, p_worker, p_admin, p_own_jobs_only)
        ON CONFLICT (singleton) DO UPDATE
           SET producer = excluded.producer, worker = excluded.worker, admin = excluded.admin,
               own_jobs_only = excluded.own_jobs_only, granted_at = now();
    END IF;
    RETURN QUERY SELECT u.s FROM unnest(statements) WITH ORDINALITY AS u(s, ord) ORDER BY u.ord;
END;
$$;

-- Grants again to the recorded roles (see grant_roles) when their
-- privileges, or PUBLIC's, differ from role_privileges: after function
-- files created functions (which PUBLIC may run, and the roles may not),
-- or someone changed them by hand. Recorded roles that no longer exist are
-- left out. Returns the statements it ran; none when nothing differed.
-- Migrate calls it at the end of every migration.
CREATE OR REPLACE FUNCTION pgtask.regrant_roles() RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    SELECT (SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = gr.producer) AS producer,
           (SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = gr.worker) AS worker,
           (SELECT r.rolname::text FROM pg_roles r WHERE r.rolname = gr.admin) AS admin,
           gr.own_jobs_only
      INTO g
      FROM pgtask.granted_roles gr;
    IF NOT FOUND OR coalesce(g.producer, g.worker, g.admin) IS NULL
       OR NOT EXISTS (SELECT 1 FROM pgtask.role_grant_drift() d WHERE d.grantee IS NOT NULL) THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT s FROM pgtask.grant_roles(g.producer, g.worker, g.admin, g.own_jobs_only, false, true) AS s;
END;
$$;

-- Takes every privilege on pgtask's objects from the roles named, drops
-- the policies that name them and forgets them as recorded roles, then
-- drops the roles (which fails if they own objects, or hold privileges in
-- other databases). Names of roles that do not exist are passed over. When
-- no recorded role is left, row-level security on pgtask.jobs and
-- pgtask.batches is switched off. Returns the statements it ran.
CREATE OR REPLACE FUNCTION pgtask.drop_roles(p_roles text[]) RETURNS SETOF text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    existing text[];
    listed text;
    statements text[] := '{}';
    o record;
    s text;
BEGIN
    SELECT array_agg(r.rolname::text ORDER BY r.rolname) INTO existing
      FROM pg_roles r WHERE r.rolname = ANY (p_roles);
    IF existing IS NULL THEN
        RETURN;
    END IF;
    SELECT string_agg(format('%I', x), ', ' ORDER BY x) INTO listed FROM unnest(existing) x;
    statements := statements
        || ('REVOKE ALL ON SCHEMA pgtask FROM ' || listed)
        || ('REVOKE ALL ON ALL TABLES IN SCHEMA pgtask FROM ' || listed)
        || ('REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgtask FROM ' || listed)
        || ('REVOKE ALL ON ALL ROUTINES IN SCHEMA pgtask FROM ' || listed);
    FOR o IN SELECT * FROM pgtask.role_objects() ro WHERE ro.object_type = 'type' ORDER BY ro.target LOOP
        statements := statements || format('REVOKE ALL ON TYPE %s FROM %s', o.target, listed);
    END LOOP;
    FOR o IN
        SELECT p.polname, p.polrelid::regclass::text AS tab
          FROM pg_policy p
          JOIN pg_class c ON c.oid = p.polrelid
         WHERE c.relnamespace = 'pgtask'::regnamespace
           AND p.polroles && ARRAY(SELECT r.oid FROM pg_roles r WHERE r.rolname = ANY (existing))
         ORDER BY 2, 1
    LOOP
        statements := statements || format('DROP POLICY %I ON %s', o.polname, o.tab);
    END LOOP;
    UPDATE pgtask.granted_roles
       SET producer = CASE WHEN producer = ANY (existing) THEN NULL ELSE producer END,
           worker = CASE WHEN worker = ANY (existing) THEN NULL ELSE worker END,
           admin = CASE WHEN admin = ANY (existing) THEN NULL ELSE admin END;
    DELETE FROM pgtask.granted_roles WHERE producer IS NULL AND worker IS NULL AND admin IS NULL;
    IF NOT EXISTS (SELECT 1 FROM pgtask.granted_roles)
       AND (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'pgtask.jobs'::regclass) THEN
        statements := statements || 'ALTER TABLE pgtask.jobs DISABLE ROW LEVEL SECURITY'::text;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgtask.granted_roles)
       AND (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'pgtask.batches'::regclass) THEN
        statements := statements || 'ALTER TABLE pgtask.batches DISABLE ROW LEVEL SECURITY'::text;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgtask.granted_roles)
       AND (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'pgtask.workflows'::regclass) THEN
        statements := statements || 'ALTER TABLE pgtask.workflows DISABLE ROW LEVEL SECURITY'::text;
    END IF;
    FOREACH s IN ARRAY existing LOOP
        statements := statements || format('DROP ROLE %I', s);
    END LOOP;
    FOREACH s IN ARRAY statements LOOP
        EXECUTE s;
        RETURN NEXT s;
    END LOOP;
END;
$$;

-- name: GrantRoles :many
-- The statements that give the producer, worker and admin roles their
-- privileges on pgtask's objects and take every other one (see
-- pgtask.grant_roles); with apply they run, and the roles are recorded. An
-- empty name is no role.
SELECT g.statement::text AS statement
  FROM pgtask.grant_roles(nullif(@producer::text, ''), nullif(@worker::text, ''), nullif(@admin::text, ''),
                          @own_jobs_only::boolean, @create_roles::boolean, @apply::boolean) AS g(statement);

-- name: RegrantRoles :many
-- Grants again to the recorded roles when their privileges differ from
-- what they should be (see pgtask.regrant_roles); what Migrate runs last.
SELECT g.statement::text AS statement FROM pgtask.regrant_roles() AS g(statement);

-- name: DropRoles :many
-- Takes pgtask's privileges from roles and drops them (see pgtask.drop_roles;
-- least-privilege roles are described in schema/functions/roles.sql).
SELECT d.statement::text AS statement FROM pgtask.drop_roles(@roles::text[]) AS d(statement);

-- name: RoleGrantDrift :many
-- How the privileges of PUBLIC and of the recorded roles differ from what
-- they should be (see pgtask.role_grant_drift); empty when they do not.
SELECT d.target::text AS target, coalesce(d.grantee, '')::text AS grantee,
       coalesce(d.privilege, '')::text AS privilege, d.problem::text AS problem
  FROM pgtask.role_grant_drift() AS d;

-- Least-privilege roles (see functions/roles.sql).

-- The login that enqueued each job. The enqueue functions run as their
-- owner (SECURITY DEFINER), so current_user there is the owner; session_user
-- is still the role the session logged in as, which the caller cannot
-- change (only a superuser can SET SESSION AUTHORIZATION), and a SET ROLE
-- does not change it. A producer that may read only its own jobs sees the
-- rows whose enqueued_by is its session's user (a row-level security policy
-- that pgtask.grant_roles creates). Jobs enqueued before this migration
-- have none: the column is added first and given its default after, so
-- that existing rows are not stamped with the migrating role, and the
-- table is not rewritten.
ALTER TABLE pgtask.jobs ADD COLUMN enqueued_by text COLLATE "C";
ALTER TABLE pgtask.jobs ALTER COLUMN enqueued_by SET DEFAULT session_user;

-- The roles pgtask.grant_roles last gave pgtask's privileges to, so that a
-- migration applying newer function files gives them their privileges on
-- functions those add (see pgtask.regrant_roles). One row at most.
CREATE TABLE pgtask.granted_roles (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    producer      text,
    worker        text,
    admin         text,
    own_jobs_only boolean NOT NULL,
    granted_at    timestamptz NOT NULL DEFAULT now()
);

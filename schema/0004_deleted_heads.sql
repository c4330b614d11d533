-- Groups whose head row a DELETE removed while they could not be advanced
-- at once (an enqueue or an advance held their row); maintenance moves them
-- on. See advance_after_delete in functions/groups.sql.
CREATE TABLE pgtask.stale_groups (
    queue     text COLLATE "C" NOT NULL,
    group_key text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- The triggers that keep a DELETE or TRUNCATE of jobs from wedging a group.
-- Created here, once (OR REPLACE: a database may have them from an earlier
-- revision of groups.sql), since creating a trigger locks the jobs table against
-- every writer; their functions' bodies live in functions/groups.sql, which
-- replaces these placeholders in the same migration pass.
CREATE OR REPLACE FUNCTION pgtask.advance_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE OR REPLACE FUNCTION pgtask.forget_groups_after_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END; $$;

CREATE OR REPLACE TRIGGER jobs_advance_after_delete
    AFTER DELETE ON pgtask.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION pgtask.advance_after_delete();

CREATE OR REPLACE TRIGGER jobs_forget_groups_after_truncate
    AFTER TRUNCATE ON pgtask.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgtask.forget_groups_after_truncate();

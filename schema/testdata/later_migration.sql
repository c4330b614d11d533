-- A migration such as a later release appends after the baseline, for the
-- tests of runtime.Migrate. Like most, it takes an exclusive lock on
-- pgtask.jobs (an ALTER TABLE), which waits for every open transaction that
-- read the table; it changes nothing the runtime reads.
ALTER TABLE pgtask.jobs ALTER COLUMN priority SET DEFAULT 0;
CREATE TABLE pgtask.later (id integer);

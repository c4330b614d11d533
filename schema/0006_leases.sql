-- Lease mode (see functions/work.sql): a job claimed with a lease is held by
-- no session. lease_until says until when its worker answers for it: its
-- heartbeat moves it on while the handler runs, and once it has passed,
-- another worker takes the job over. NULL for a job claimed in the
-- held-transaction mode, whose session's row lock answers for it.
--
-- stale_outcomes counts outcomes a worker sent for an attempt that was no
-- longer the job's current one (it was taken over, or settled already):
-- refused, never recorded.
--
-- Neither column is indexed, so the heartbeat's updates stay HOT; adding
-- them rewrites nothing.
ALTER TABLE pgtask.jobs
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN stale_outcomes integer NOT NULL DEFAULT 0;
